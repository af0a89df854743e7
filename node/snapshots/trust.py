"""Who may sign a snapshot this node loads, and the checks every loaded event passes.

A snapshot is only as good as its signer: anyone can write record files and sign them with a
fresh key, so ``bootstrap`` and ``snapshot pull`` accept a record file only when the node that
signed it (the ``record<PEER_ID>`` directory, whose key verifies the signature file) is one the
operator trusts: ``--signer`` flags, else ``spark.snapshot_signers``, else this data dir's own
key and ``p2p.allowed_peers``. And a loaded event is held to exactly the rules an event from
gossip, Recon or fetch meets (``sync.ingest.admit_event``: closed group and channel writers, the
Lamport clock bound at load time), so the node never holds, and so never relays, an event its
peers refuse (docs/security.md "Snapshots"). Events of a channel this node does not replicate
are left out rather than refused: a group that uses the database, loaded by a node that has not
enabled it, still gives that node every channel it runs, and the load says what it left out and
which key takes it (``left_out_hint``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from node.config.channels import channel_names, channel_writers
from node.config.settings import Config
from node.datadir import KEY_FILE
from node.snapshots.precheck import BootstrapError, trusted_signers
from storage import EventRecord
from sync.errors import RemoteProtocolError
from sync.gossip import SenderPolicy
from sync.ingest import EventRules
from sync.recordstream import node_of_dir

__all__ = ["LoadRules", "left_out_hint", "load_rules", "signer_problem"]


@dataclass(frozen=True)
class LoadRules:
    """What a snapshot load accepts (picklable: it goes to the verifying workers).

    ``signers``: peer ids whose record files count; ``events``: the ingest rules, applied at
    ``now`` (wall seconds, taken once when the load starts)."""

    signers: frozenset[str]
    events: EventRules
    now: float

    @classmethod
    def open(cls, signers: Iterable[str], channels: Iterable[str], now: float,
             max_ahead_ms: int = 600_000) -> LoadRules:
        """Rules of an open group with no channel writers (tools, tests, benchmarks)."""
        return cls(frozenset(signers), EventRules(frozenset(channels), SenderPolicy(""),
                                                  max_ahead_ms), now)

    def replicates(self, channel: str) -> bool:
        """This node replicates ``channel``: its events are loaded (and checked), the others
        are left out (counted and reported), as the node would never store them."""
        return channel in self.events.channels

    def check(self, path: str, record: EventRecord) -> None:
        """``BootstrapError`` naming the event and the rule it breaks."""
        try:
            self.events.admit(record.channel, record.sender, True, record.lamport, self.now)
        except RemoteProtocolError as exc:
            raise BootstrapError(
                f"{path}: event {record.message_id} (sender {record.sender}, lamport "
                f"{record.lamport}) is refused as it would be from a peer: {exc.reason}"
            ) from None


def left_out_hint(channel: str, count: int, config: Config, snapshot: str) -> str:
    """What was left out of a load, and how to take it: the key that makes this node replicate
    ``channel`` (the snapshot's group uses a hosted application or channel this node does not
    run), then ``snapshot pull`` (bootstrap needs an empty database, pull adds the rest)."""
    if channel == config.db.channel:
        enable = "set SYNCNODE_DB_ENABLED=true (or [db] enabled = true)"
    elif channel == config.blocks.channel:
        enable = ("set SYNCNODE_BLOCKS_ENABLED=true (or [blocks] enabled = true, with "
                  "blocks.producers)")
    else:
        enable = f"add {channel!r} to p2p.channels (SYNCNODE_P2P_CHANNELS)"
    return (f"left out {count} events of channel {channel!r} (this node does not replicate it): "
            f"to take them, {enable} and run `syncnode snapshot pull {snapshot}`")


def signer_problem(path: str, signers: frozenset[str]) -> str | None:
    """Why the record file at ``path`` is not from a trusted signer (None: it is)."""
    signer = node_of_dir(path.rpartition("/")[0])
    if signer in signers:
        return None
    return (f"{path}: signed by {signer or 'an unnamed node'}, which is not a trusted snapshot "
            "signer (--signer PEER_ID, spark.snapshot_signers)")


def _own_peer_id(data_dir: Path) -> str | None:
    if not (data_dir / KEY_FILE).is_file():
        return None
    from node.p2p.identity import IdentityError, load_identity
    from sync.identity import peer_id_of

    try:
        return peer_id_of(load_identity(data_dir / KEY_FILE))
    except IdentityError:
        return None


def load_rules(config: Config, flags: Iterable[str], now: float) -> LoadRules:
    """The rules for a load into ``config``'s data dir: trusted signers from ``flags``, else
    the config key, else the defaults; ``BootstrapError`` when that leaves nobody."""
    own = _own_peer_id(config.data_path)
    signers = trusted_signers(config, flags, own)
    members = frozenset(config.p2p.allowed_peers) or None
    policy = SenderPolicy(own or "", members, channel_writers(config))
    events = EventRules(frozenset(channel_names(config)), policy,
                        config.sds.max_lamport_ahead_ms)
    return LoadRules(signers, events, now)
