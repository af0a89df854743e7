"""The reconciliation phase of a Recon stream, sans-IO: frame rules around a
:class:`~sync.recon.session.ReconSession`, the BUSY answer, and the bound on missing keys; plus
the gossip-grace filter applied to the keys before they are fetched.

Every frame of the phase is ``RECON`` + a Recon message. The responder may instead answer the
initiator's first message with a lone ``BUSY`` (it is already in a session with us): the
exchange ends as *declined*, which is not a failure. Of the keys found missing the causally
first ``max_missing_keys`` are kept (bounded memory for keys we do not have); the rest waits
for a later session and the exchange is marked *truncated* (an honest catch-up just takes more
sessions). The step that ends the session returns ``Reconciled`` last, after its frame. Once
the session is done, ``missing`` is in causal order (lowest height first), the
order they are claimed and fetched in, so that SDS can deliver each fetched event as it
arrives (``sync.transfer.causal``). The order is put here, in the Recon worker thread where
the driver runs the exchange, rather than in the event loop.

The phase has a deadline: ``timeout_s`` (``recon.session_timeout_s``) after ``started``, the
driver's clock when the session began (``ReplicationCore.begin``). ``get_timer()`` returns it
while the phase runs; at or after it ``handle_timer(now)`` (and ``receive``, should a frame
come in late) ends the exchange with :class:`Abort`: a peer that trickles frames cannot hold a
session slot for longer. The transfer phases after it have no overall deadline (a large
catch-up takes as long as it takes; their every read has a timeout and a stalled batch ends
the session).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from sync.actions import Abort, Action, Charge, Declined, KeysDropped, Reconciled, SendFrame
from sync.errors import LocalProtocolError, RemoteProtocolError
from sync.recon.reads import KeysRead, ReadKeys
from sync.recon.session import Incoming, MissingKeys, ReconSession, Step
from sync.transfer.causal import causal_rank, height_of
from sync.transfer.frames import BUSY, RECON
from sync.workbudget import recon_message_units

__all__ = ["BUSY_FRAME", "ReconExchange", "not_recent"]

BUSY_FRAME = bytes([BUSY])
#: Cut points kept of the dropped keys (a 1,000-range backlog; more only make ranges larger).
MAX_CUTS = 1000




@dataclass
class ReconExchange:
    session: ReconSession
    max_missing_keys: int
    peer: str | None = None
    timeout_s: float = math.inf
    started: float = 0.0
    missing: list[bytes] = field(default_factory=list)
    truncated: bool = False
    declined: bool = False
    #: Of the keys dropped (beyond the bound): the smallest, and one in every
    #: ``max_missing_keys`` (at most ``MAX_CUTS``): where to cut the rest into ranges of about
    #: a session's worth (``sync.transfer.RangeBacklog``).
    lowest_dropped: bytes | None = None
    #: The backlog range this exchange reconciles (None: all the node's interests).
    scope: tuple[bytes, bytes] | None = None
    cuts: list[bytes] = field(default_factory=list)
    dropped: int = 0
    aborted: bool = False
    #: Answer each frame only after the driver charged its sender for it (:class:`Charge`).
    charging: bool = False
    _held: Incoming | None = field(default=None, repr=False)
    # ``missing`` with each key's causal rank, computed once as the key is announced: a
    # session that finds N keys missing cuts them back ~N / max_missing_keys times, and
    # parsing every kept key's height again at each cut cost more than the sort.
    _ranks: list[tuple[int, bytes]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError("timeout_s > 0 is required")

    @property
    def done(self) -> bool:
        return self.declined or self.aborted or self.session.done

    def get_timer(self) -> float:
        """When the phase times out (``math.inf`` once it is over)."""
        return math.inf if self.done else self.started + self.timeout_s

    def handle_timer(self, now: float) -> list[Action]:
        """``[Abort]`` once ``now`` reached the deadline of a phase still running, else []."""
        if self.done or now < self.started + self.timeout_s:
            return []
        self.aborted = True
        return [Abort(f"the reconciliation took longer than {self.timeout_s:g} s")]

    def start(self) -> list[Action]:
        """The initiator's first frame (``SendFrame``), or the reads it needs first."""
        return self._stepped(self.session.start())

    def receive(self, frame: bytes, now: float) -> list[Action]:
        """Feed one frame; the actions to carry out, in order. A frame at or after the
        deadline is not looked at: the exchange aborts. ``[ReadKeys]`` (from an asking key
        store) leaves the exchange as it was: make the reads, feed them to :meth:`keys_read`."""
        if self.done:
            raise LocalProtocolError("the reconciliation is over")
        if timed_out := self.handle_timer(now):
            return timed_out
        session = self.session
        if frame == BUSY_FRAME and session.is_initiator and session.messages_received == 0:
            self.declined = True
            return [Declined()]
        if not frame or frame[0] != RECON:
            raise RemoteProtocolError("expected a Recon message", self.peer)
        if self.charging:
            self._held = session.decode(frame[1:])
            return [Charge(recon_message_units(self._held.message))]
        return self._stepped(session.receive(frame[1:]))

    def charged(self, now: float) -> list[Action]:
        """The peer was charged for the frame :meth:`receive` decoded: answer it now."""
        held, self._held = self._held, None
        if held is None:
            raise LocalProtocolError("no decoded frame waits for its charge")
        if timed_out := self.handle_timer(now):
            return timed_out
        return self._stepped(self.session.receive(held))

    def keys_read(self, answer: KeysRead) -> list[Action]:
        """The reads a ``ReadKeys`` asked for: the step that asked runs with them; the actions
        as :meth:`start` or :meth:`receive` would have returned them."""
        return self._stepped(self.session.keys_read(answer))

    def _stepped(self, reply: Step) -> list[Action]:
        if isinstance(reply, ReadKeys):
            return [reply]
        session = self.session
        actions: list[Action] = []
        dropped = sum(self._keep(event.keys) for event in session.events()
                      if isinstance(event, MissingKeys))
        if session.done:
            # In causal order once complete: the order the keys are claimed and fetched in.
            dropped += self._trim()
        if dropped:
            actions.append(KeysDropped(dropped))
        if reply is not None:
            actions.append(SendFrame(bytes([RECON]) + reply))
        if session.done:
            actions.append(Reconciled(len(self.missing), self.dropped, self.truncated))
        return actions

    def _keep(self, keys: tuple[bytes, ...] | list[bytes]) -> int:
        """Take announced missing keys; how many were dropped to stay within the bound.

        The keys kept are the causally first ``max_missing_keys`` of all announced, not the
        first announced: reconciliation announces the ranges that settle soonest first, which
        for a peer holding part of a stream are its later events, and fetched without their
        dependencies those wait in SDS's bounded buffer, are evicted and are fetched again
        (``sync.transfer.causal``). Found keys are gathered up to twice the bound, then cut
        back to the causally first (every key dropped ranks after every key kept, since the
        cut only moves down)."""
        self.missing.extend(keys)
        self._ranks.extend(map(causal_rank, keys))
        if len(self.missing) < 2 * max(self.max_missing_keys, 1):
            return 0
        return self._trim()

    def _trim(self) -> int:
        """Put ``missing`` in causal order and cut it back to its first ``max_missing_keys``;
        how many went."""
        ranked = self._ranks
        ranked.sort()
        bound = self.max_missing_keys
        self.missing = [key for _, key in ranked[:bound]]
        if len(ranked) <= bound:
            return 0
        rest = sorted(key for _, key in ranked[bound:])
        del ranked[bound:]
        self.truncated = True
        low = rest[0]
        if self.lowest_dropped is None or low < self.lowest_dropped:
            self.lowest_dropped = low
        every = max(bound, 1)
        # Dropped keys in key order, one in every ``every`` (counting across cuts).
        first = -self.dropped % every
        if len(self.cuts) < MAX_CUTS:
            self.cuts.extend(rest[first::every][: MAX_CUTS - len(self.cuts)])
        self.dropped += len(rest)
        return len(rest)


def not_recent(keys: Iterable[bytes], now_ms: int, grace_ms: int,
               since_ms: int | None = None) -> list[bytes]:
    """The keys to fetch now: those of events gossip is probably still delivering (height
    within ``grace_ms`` of ``now_ms``, our wall clock) are left out, since fetching them as
    well would move and verify them twice just when the node has least time to spare. A height
    far ahead of our clock (a sender's fast clock) is not held back, nor is a key without one
    (the ceramic-one layout has no event height) or a malformed key (fetched, and rejected on
    validation). ``since_ms``: only events stamped after it are in flight (a prompt session:
    what came before was not gossiped to us)."""
    if grace_ms <= 0:
        return list(keys)
    lo, hi = now_ms - grace_ms, now_ms + grace_ms
    if since_ms is not None:
        lo = max(lo, since_ms + 1)
    kept = []
    for key in keys:
        height = height_of(key)
        if height is None or not lo <= height <= hi:
            kept.append(key)
    return kept
