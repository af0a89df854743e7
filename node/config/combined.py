"""Config keys that are each in range but must also work together: checked by building the
protocol configurations they feed (``sync.sds.SdsConfig``, ``sync.recon.ReconConfig``), so
``config validate``, ``run`` and the daemon refuse a bad combination with one clear line
before anything is opened."""

from __future__ import annotations

from node.config.fields import ConfigError
from node.config.settings import Config, SdsSection
from sync.errors import LocalProtocolError
from sync.recon.session import ReconConfig
from sync.sds import SdsConfig

__all__ = ["check_combined_keys", "recon_config", "sds_config"]

# A failed SdsConfig check -> the node key to name and what it asks (SdsConfig's own field
# names differ for some keys, and sync_history_size is fixed at 16 by the node).
_SDS_HINTS = {
    "sync_history_size": ("causal_history_size", "must be <= 16 (the ids a sync message names)"),
    "t_max": ("repair_t_max_s", "must be > sds.repair_t_min_s"),
    "delivered_window": ("delivered_window", "must be >= sds.bloom_capacity (and >= 64)"),
    "max_waiting_per_sender": ("max_waiting_per_sender", "must be <= sds.max_waiting"),
    "max_waiting_bytes_per_sender": ("max_waiting_bytes_per_sender",
                                     "must be <= sds.max_waiting_bytes and >= 2 MiB"),
    "max_waiting_bytes": ("max_waiting_bytes",
                          "must be >= 2 MiB (two messages of the largest size)"),
    "max_missing_per_sender": ("max_missing_per_sender", "must be <= sds.max_missing"),
    "repair_total_bytes": ("repair_total_bytes", "must be >= sds.repair_requester_bytes"),
}


def sds_config(config: Config) -> SdsConfig:
    s = config.sds
    try:
        return _sds_config(s)
    except LocalProtocolError as exc:  # a combination of keys SDS cannot work with
        field = str(exc).rsplit(".", 1)[-1]
        key, hint = _SDS_HINTS.get(field, (field, "inconsistent with the other sds keys"))
        raise ConfigError(f"sds.{key}", f"{hint} (docs/security.md)") from None


def recon_config(config: Config) -> ReconConfig:
    try:
        r = config.recon
        return ReconConfig(fanout=r.fanout, max_key_list=r.max_key_list,
                           max_message_bytes=r.max_message_bytes,
                           max_message_ranges=r.max_message_ranges,
                           max_message_keys=r.max_message_keys)
    except LocalProtocolError as exc:  # e.g. a fanout above what a Recon message may carry
        raise ConfigError("recon", f"{exc} (docs/security.md)") from None


def check_combined_keys(config: Config) -> None:
    """``ConfigError`` when keys that are each in range do not work together. Called before a
    node opens anything, so that the user gets the one-line reason, not a failure of the
    running node."""
    sds_config(config)
    recon_config(config)
    _check_gossip_degrees(config)


def _check_gossip_degrees(config: Config) -> None:
    p = config.p2p
    if not p.gossip_degree_low <= p.gossip_degree <= p.gossip_degree_high:
        raise ConfigError("p2p", "need gossip_degree_low <= gossip_degree <= gossip_degree_high,"
                          f" got {p.gossip_degree_low}, {p.gossip_degree}, {p.gossip_degree_high}")


def _sds_config(s: SdsSection) -> SdsConfig:
    return SdsConfig(
        causal_history_size=s.causal_history_size,
        bloom_capacity=s.bloom_capacity,
        bloom_small_max=s.bloom_small_max,
        bloom_small_max_request_sync=s.bloom_small_max_request_sync,
        bloom_fp_rate=s.bloom_fp_rate,
        resend_interval=s.resend_interval_s,
        possibly_acked_resend_interval=3 * s.resend_interval_s,
        max_resends=s.max_resends,
        lost_timeout=s.lost_timeout_s,
        sync_interval=s.sync_interval_s,
        sync_jitter=s.sync_interval_s,
        t_min=s.repair_t_min_s,
        t_max=s.repair_t_max_s,
        max_lamport_ahead_ms=s.max_lamport_ahead_ms,
        max_waiting=s.max_waiting,
        max_waiting_bytes=s.max_waiting_bytes,
        max_waiting_per_sender=s.max_waiting_per_sender,
        max_waiting_bytes_per_sender=s.max_waiting_bytes_per_sender,
        max_missing=s.max_missing,
        delivered_window=s.delivered_window,
        max_missing_per_sender=s.max_missing_per_sender,
        repair_cache_bytes=s.repair_cache_bytes,
        max_outgoing_bytes=s.max_outgoing_bytes,
        resend_bytes_per_s=s.resend_bytes_per_s,
        ack_min_filters=s.ack_min_filters,
        num_response_groups=s.response_groups,
        member_window=s.member_window_s,
        max_heads=s.max_heads,
        head_ttl=s.head_ttl_s,
        repair_cooldown=s.repair_cooldown_s,
        repair_window=s.repair_window_s,
        repair_requester_bytes=s.repair_requester_bytes,
        repair_total_bytes=s.repair_total_bytes,
    )


