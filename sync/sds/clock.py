"""The Lamport clock rule: which received timestamps a channel accepts, and clock recovery.

SDS seeds the Lamport clock from wall-clock milliseconds and moves it to any larger received
timestamp (spec, "Protocol steps"). Unchecked, one validly signed message with a huge timestamp
drags every receiver's clock to a value it cannot store (SQL integers are signed 64-bit), cannot
publish after, or that its peers reject. The rule (docs/security.md "Clocks"):

* a received timestamp must not exceed ``min(LAMPORT_MAX, now_ms + max_ahead_ms)``;
* the bound is taken from the receiver's *wall clock*, never from its Lamport clock: a clock
  bound would let a chain of messages, each ``max_ahead_ms`` past the last, ratchet it without
  limit;
* ``LAMPORT_MAX`` leaves 2^32 ticks of head room under the signed 64-bit maximum, so ``+ 1`` on
  an accepted value never leaves what SQLite and PostgreSQL store.
"""

from __future__ import annotations

from sync.errors import ErrorKind, RemoteProtocolError

__all__ = [
    "LAMPORT_MAX",
    "REASON_AHEAD",
    "REASON_RANGE",
    "check_lamport",
    "lamport_bound",
    "recovered_clock",
]

#: The largest timestamp accepted from anybody: signed 64-bit maximum less 2^32 of head room.
LAMPORT_MAX = (1 << 63) - 1 - (1 << 32)
#: Rejection reasons (the prefix of ``RemoteProtocolError.reason``, the metric label).
REASON_RANGE = "lamport out of range"
REASON_AHEAD = "lamport too far ahead"


def lamport_bound(now: float, max_ahead_ms: int) -> int:
    """The largest timestamp acceptable at wall time ``now`` (float seconds)."""
    return min(LAMPORT_MAX, max(0, int(now * 1000)) + max_ahead_ms)


def check_lamport(lamport: int, now: float, max_ahead_ms: int) -> None:
    """``RemoteProtocolError`` if a received ``lamport`` breaks the rule at ``now``."""
    if not 0 <= lamport <= LAMPORT_MAX:
        raise RemoteProtocolError(f"{REASON_RANGE}: {lamport}", kind=ErrorKind.LAMPORT_RANGE)
    # ``lamport_bound`` without its two builtin calls (this runs for every received message):
    # ``lamport`` is within LAMPORT_MAX here, so only the ``now`` side of its min can bind.
    now_ms = int(now * 1000)
    if lamport > (now_ms if now_ms > 0 else 0) + max_ahead_ms:
        raise RemoteProtocolError(f"{REASON_AHEAD}: {lamport} at {int(now * 1000)} ms",
                                  kind=ErrorKind.LAMPORT_AHEAD)


def recovered_clock(candidates: list[int], now: float, max_ahead_ms: int) -> tuple[int, bool]:
    """A clock from persisted values (state, log) that may have been poisoned before the rule.

    Returns (clock, recovered): the largest candidate within the rule at ``now`` (at least wall
    time), and whether any candidate was out of range and so ignored.
    """
    bound = lamport_bound(now, max_ahead_ms)
    clock = max(0, int(now * 1000))
    recovered = False
    for value in candidates:
        if value > bound:
            recovered = True
        elif value > clock:
            clock = value
    return min(clock, LAMPORT_MAX), recovered
