"""Counters of an ``SdsChannel`` (for metrics and tests): what it dropped, ignored or resent,
and what a restore had to repair."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ChannelStats"]


@dataclass
class ChannelStats:
    #: Resends of own messages since the channel object was made.
    resends: int = 0
    #: Content messages received again after their delivery (resends, repairs, the same event
    #: by gossip and by Recon): dropped, counted for ``events_duplicate_total``.
    duplicates_received: int = 0
    #: Fetched or stored events (``receive_event``) left waiting in the dependency buffer:
    #: 0 while fetches come in causal order (``sync.transfer.causal``). Gossip copies that
    #: wait are SDS's ordinary out-of-order case and are not counted here.
    fetched_waiting: int = 0
    #: Repair requests ignored because their sender did not sign them (a relay or a replay
    #: attached them to someone else's message) ...
    repair_unsigned_ignored: int = 0
    #: ... or because they rode on a message older than ``t_min`` (a replay).
    repair_stale_ignored: int = 0
    #: Set by ``restore`` when the persisted clock broke the clock rule and was reset.
    clock_recovered: bool = False
    #: Set by ``restore``: our unacknowledged messages the saved state named whose wires were
    #: not given back (they stay in the log; they are just not resent).
    outgoing_unrestored: int = 0
    #: Set by ``restore``: our unacknowledged messages whose resend fell due while the node
    #: was down; not resent (the restart's Recon sessions carry them; ``sync.sds.persist``).
    outgoing_overdue: int = 0
    #: Set by ``restore``: our unacknowledged messages whose resend was still ahead, left to
    #: the restart's Recon sessions too (``restore(..., resend_restored=False)``).
    outgoing_left: int = 0
