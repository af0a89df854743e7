"""The ``[reachability]`` section: dial-back verdict, relay client and service, hole punching
(docs/network.md)."""

from __future__ import annotations

from dataclasses import dataclass

from node.config.fields import DAY, non_negative, one_of, opt, positive
from sync.reachability import ReachabilityConfig

__all__ = ["ReachabilitySection", "reachability_config"]


@dataclass(frozen=True)
class ReachabilitySection:
    enabled: bool = opt(True)
    serve_relay: str = opt("auto", one_of("auto", "on", "off"))
    relays_wanted: int = opt(2, positive, most=64)
    relay_retry_s: float = opt(10.0, non_negative, most=DAY)
    reservation_refresh_s: float = opt(300.0, positive, most=DAY)
    confirmations: int = opt(2, positive, most=64)
    network_prefix_v4: int = opt(16, non_negative, most=32)
    network_prefix_v6: int = opt(32, non_negative, most=128)
    evidence_per_network: int = opt(2, positive, most=64)
    probe_interval_s: float = opt(120.0, positive, most=DAY)
    hole_punch: bool = opt(True)
    punch_attempts: int = opt(8, positive, most=1000)
    punch_backoff_s: float = opt(3.0, non_negative, most=DAY)
    punch_backoff_max_s: float = opt(15.0, non_negative, most=DAY)
    punch_rest_s: float = opt(300.0, non_negative, most=30 * DAY)
    punch_follow_s: float = opt(15.0, non_negative, most=DAY)
    max_reservations: int = opt(32, positive, most=100_000)
    max_circuits: int = opt(64, positive, most=100_000)
    circuit_duration_s: int = opt(600, positive, most=30 * DAY)
    circuit_bytes: int = opt(64 * 1024 * 1024, positive, most=1 << 40)
    circuit_rate_bytes_s: int = opt(1024 * 1024, positive, most=1 << 34)
    reservation_ttl_s: int = opt(900, positive, most=30 * DAY)
    relay_share_prefix_v4: int = opt(24, non_negative, most=32)
    relay_share_prefix_v6: int = opt(48, non_negative, most=128)
    relay_reservations_per_network: int = opt(4, positive, most=100_000)
    relay_circuits_per_network: int = opt(16, positive, most=100_000)


def reachability_config(section: ReachabilitySection) -> ReachabilityConfig | None:
    if not section.enabled:
        return None
    return ReachabilityConfig(
        serve_relay=section.serve_relay, relays_wanted=section.relays_wanted,
        relay_retry_s=section.relay_retry_s, reservation_refresh_s=section.reservation_refresh_s,
        confirmations=section.confirmations, probe_interval_s=section.probe_interval_s,
        hole_punch=section.hole_punch, punch_attempts=section.punch_attempts,
        punch_backoff_s=section.punch_backoff_s, punch_backoff_max_s=section.punch_backoff_max_s,
        punch_rest_s=section.punch_rest_s, punch_follow_s=section.punch_follow_s,
        max_reservations=section.max_reservations,
        max_circuits=section.max_circuits, circuit_duration_s=section.circuit_duration_s,
        circuit_bytes=section.circuit_bytes, circuit_rate_bytes_s=section.circuit_rate_bytes_s,
        reservation_ttl_s=section.reservation_ttl_s,
        network_prefix_v4=section.network_prefix_v4, network_prefix_v6=section.network_prefix_v6,
        evidence_per_network=section.evidence_per_network,
        relay_share_prefix_v4=section.relay_share_prefix_v4,
        relay_share_prefix_v6=section.relay_share_prefix_v6,
        relay_reservations_per_network=section.relay_reservations_per_network,
        relay_circuits_per_network=section.relay_circuits_per_network,
    )
