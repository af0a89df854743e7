"""The ``[membership]`` section: address book, peer exchange and connection manager
(docs/network.md "Membership")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from node.config.fields import DAY, HOUR, ConfigError, opt, positive
from sync.membership import BookLimits, ConnLimits

__all__ = ["MembershipSection", "book_limits", "conn_limits"]


def _at_least(low: int) -> Any:
    return lambda v: None if v >= low else f"must be >= {low}"


@dataclass(frozen=True)
class MembershipSection:
    # -- connection manager --
    low_watermark: int = opt(8, _at_least(1), most=1_000)
    high_watermark: int = opt(32, _at_least(1), most=10_000)
    grace_s: float = opt(10.0, positive, most=HOUR)
    idle_timeout_s: float = opt(20.0, positive, most=DAY)
    max_inbound: int = opt(200, _at_least(1), most=10_000)
    max_inbound_per_ip: int = opt(64, _at_least(1), most=10_000)
    inbound_per_peer_per_min: int = opt(60, _at_least(1), most=100_000)
    housekeeping_interval_s: float = opt(2.0, positive, most=HOUR)
    # -- liveness (sync.membership.liveness) --
    ping_interval_s: float = opt(5.0, positive, most=HOUR)
    ping_timeout_s: float = opt(5.0, positive, most=HOUR)
    ping_failures_close: int = opt(3, _at_least(1), most=100)
    # -- address book --
    address_book_size: int = opt(1000, _at_least(16), most=1_000_000)
    address_book_per_bucket: int = opt(32, _at_least(1), most=100_000)
    address_book_per_source: int = opt(32, _at_least(1), most=100_000)
    address_book_save_interval_s: float = opt(30.0, positive, most=DAY)
    # -- peer exchange --
    px: bool = opt(True)
    px_interval_s: float = opt(30.0, positive, most=DAY)
    px_max_records: int = opt(
        16, lambda v: None if 1 <= v <= 256 else "must be in [1, 256]", most=256
    )
    px_record_max_bytes: int = opt(2048, lambda v: None if 256 <= v <= 65536
                                   else "must be in [256, 65536]", most=65536)

    def __post_init__(self) -> None:
        if self.high_watermark < self.low_watermark:
            raise ConfigError("membership.high_watermark",
                              f"must be >= low_watermark ({self.low_watermark})")
        if self.max_inbound_per_ip > self.max_inbound:
            raise ConfigError("membership.max_inbound_per_ip",
                              f"must be <= max_inbound ({self.max_inbound})")


def conn_limits(section: MembershipSection) -> ConnLimits:
    return ConnLimits(low_watermark=section.low_watermark,
                      high_watermark=section.high_watermark, grace_s=section.grace_s,
                      idle_timeout_s=section.idle_timeout_s, max_inbound=section.max_inbound,
                      max_inbound_per_ip=section.max_inbound_per_ip,
                      inbound_per_peer_per_min=section.inbound_per_peer_per_min)


def book_limits(section: MembershipSection) -> BookLimits:
    return BookLimits(capacity=section.address_book_size,
                      per_bucket=section.address_book_per_bucket,
                      per_source=section.address_book_per_source)
