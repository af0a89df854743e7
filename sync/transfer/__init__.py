"""Sans-IO cores of the transfer protocols: the WANT/EVENTS transfer after Recon with its
claims and budgets, fetch-by-id, and caps on what a peer may have in flight."""

from __future__ import annotations

from sync.transfer.backlog import KeyRange, RangeBacklog
from sync.transfer.causal import causal_order
from sync.transfer.claims import ClaimTable, Lapsed
from sync.transfer.exchange import BUSY_FRAME, ReconExchange, not_recent
from sync.transfer.fetch import FetchQueue, FetchReader, encode_request, parse_request, plan_peers
from sync.transfer.frames import (
    BUSY,
    EVENTS,
    EVENTS_LAST,
    RECON,
    WANT,
    WANT_LAST,
    FrameDecodeError,
    pack_items,
    pack_list,
    unpack_items,
)
from sync.transfer.limits import REFUSED_PENALTY, InFlight
from sync.transfer.want import (
    EventsFrame,
    EventsPacker,
    WantFetcher,
    WantList,
    WantServer,
    byte_batches,
)

__all__ = [
    "BUSY",
    "BUSY_FRAME",
    "EVENTS",
    "EVENTS_LAST",
    "RECON",
    "REFUSED_PENALTY",
    "WANT",
    "WANT_LAST",
    "ClaimTable",
    "EventsFrame",
    "EventsPacker",
    "FetchQueue",
    "FetchReader",
    "FrameDecodeError",
    "InFlight",
    "KeyRange",
    "Lapsed",
    "RangeBacklog",
    "ReconExchange",
    "WantFetcher",
    "WantList",
    "WantServer",
    "byte_batches",
    "causal_order",
    "encode_request",
    "not_recent",
    "pack_items",
    "pack_list",
    "parse_request",
    "plan_peers",
    "unpack_items",
]
