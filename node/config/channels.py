"""What the configuration says about channels: every channel the node replicates, each one's SDS
profile, and the channels only some peers may write.

These are read by the services' builder, the snapshot scheduler, snapshot trust and the CLI;
they live beside the config (they need nothing but it) so that none of those imports another.
The hosted applications (``node.apps.plugins.PLUGINS``) report their channels from here too.
"""

from __future__ import annotations

from node.config.apps import BlocksSection
from node.config.settings import Config
from sync.cardinal import PrefixRouter

__all__ = [
    "app_channels", "blocks_channels", "blocks_router", "channel_names", "channel_profiles",
    "channel_writers", "db_channels",
]


def blocks_router(section: BlocksSection) -> PrefixRouter:
    """The ``routes`` entries (``REGEX=CHANNEL``, first match wins) as a PrefixRouter."""
    table: dict[str, str] = {}
    for entry in section.routes:
        pattern, _, channel = entry.rpartition("=")
        table.setdefault(pattern, channel)
    return PrefixRouter(table, section.channel)


def blocks_channels(config: Config) -> list[str]:
    """The block streams' channels (none unless ``blocks.enabled``)."""
    if not config.blocks.enabled:
        return []
    return list(blocks_router(config.blocks).channels())


def db_channels(config: Config) -> list[str]:
    """The replicated database's channel (none unless ``db.tables`` seeds one or it is asked)."""
    return [config.db.channel] if config.db.active else []


def app_channels(config: Config) -> list[str]:
    """The channels the hosted applications need, in the order of ``PLUGINS``."""
    return [*blocks_channels(config), *db_channels(config)]


def channel_names(config: Config) -> list[str]:
    """Configured channels plus those the hosted applications need, in order, once each."""
    return list(dict.fromkeys([*config.p2p.channels, *app_channels(config)]))


def channel_profiles(config: Config) -> dict[str, str]:
    """The SDS profile of every channel: ``[sds] profile`` for the configured channels, the
    applications' channels "syncnode" (their writers are authorised by signature), then the
    ``[sds] channel_profiles`` overrides."""
    apps = set(app_channels(config))
    out = {name: "syncnode" for name in channel_names(config)}
    out.update({name: config.sds.profile for name in config.p2p.channels if name not in apps})
    for item in config.sds.channel_profiles:
        name, _, profile = item.partition("=")
        out[name] = profile
    return out


def channel_writers(config: Config) -> dict[str, frozenset[str]]:
    """Channels whose content only some peers may send: the block streams' producers."""
    if not config.blocks.enabled:
        return {}
    producers = frozenset(config.blocks.producers)
    return {name: producers for name in blocks_router(config.blocks).channels()}
