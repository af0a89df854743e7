"""Which message ids a channel has delivered: the newest in memory, the rest asked of the driver.

A channel's log grows without bound, but SDS only needs recent ids in memory (causal histories,
the bloom filter and repairs name recent messages). ``DeliveredIndex`` keeps the ids of the
newest ``window`` deliveries, in delivery order, and the *floor*: every delivered id with a
Lamport timestamp above it is in memory. Where an id binds its sender and its Lamport time (a
checked SDS id: the digest covers both) the index also keeps a floor per sender, the highest
timestamp of that sender's ids it evicted: a catch-up that delivers one sender's stream after
another's (Recon's key order is sender first) then finds the second sender's events above
that sender's floor, though far below the channel's, and needs no store question for them.

A question memory cannot answer (an id below its floor, or a history entry not in memory once
something was evicted) is never put to storage from inside a step: a received message's step
asks it as its first act, before it changes anything (:meth:`DeliveredIndex.settle`), and the
channel returns the action :class:`ReadDelivered`; the driver reads its store (the node: its
database and its queue of uncommitted writes, off the protocol step) and feeds the input
:class:`DeliveredRead` back (``SdsChannel.delivered_read``), on which the waiting step runs (as
Recon's ``ReadKeys`` and ``KeysRead``). Steps whose questions their caller asks up front (an
ingest batch: :meth:`DeliveredIndex.reads_for_steps`) raise the internal
:class:`DeliveredNeeded` should one be left: a bug's guard, never the way to ask. Unbounded
(the pure protocol tests, the simulator) nothing is evicted: the whole log stays in memory and
nothing is ever asked.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from sync.sds.message import SignedEvent

__all__ = ["STALE_ANSWERS", "DeliveredIndex", "DeliveredNeeded", "DeliveredRead", "ReadDelivered"]

#: Stale answers to one question before the next is used whatever came in meanwhile (each
#: stale one means a whole delivered window arrived while the store was read).
STALE_ANSWERS = 3


@dataclass(frozen=True)
class ReadDelivered:
    """A request to the driver: which of ``ids`` are in this channel's log (committed or
    queued to be)? Answer with ``SdsChannel.layers.log.answer(read, found)``.

    ``held`` / ``not_held``: what memory could say when the request was made (an ingest batch
    asks for every id it names up front: a long batch may evict some of them from memory
    before a later event names them). ``epoch``: the index's delivery count then (a "not held"
    answer is void if a whole window of deliveries came in while the driver read)."""

    ids: tuple[str, ...]
    held: frozenset[str] = frozenset()
    not_held: frozenset[str] = frozenset()
    epoch: int = 0

    def again(self, epoch: int) -> ReadDelivered:
        """The request once more, from ``epoch`` (its answer came back stale): what memory
        held still is, what it lacked may not be."""
        return ReadDelivered(self.ids + tuple(self.not_held), self.held, epoch=epoch)


@dataclass(frozen=True)
class DeliveredRead:
    """The driver's answer to ``read``: those of its ids in the channel's log."""

    read: ReadDelivered
    found: frozenset[str]


class DeliveredNeeded(Exception):
    """Inside ``sync.sds`` only: a step that needs ``read`` answered stops (having done
    nothing); the channel's edge turns it into the returned ``ReadDelivered``."""

    def __init__(self, read: ReadDelivered) -> None:
        super().__init__(f"{len(read.ids)} delivered ids to read")
        self.read = read


class DeliveredIndex:
    def __init__(self, window: int, bounded: bool = False, per_sender: bool = False) -> None:
        """``per_sender``: keep a floor per sender (only where an id binds its sender and its
        Lamport time, else an id seen from one sender could be taken as new from another)."""
        if window < 1:
            raise ValueError("window must be >= 1")
        # Ordered by delivery, oldest first. An OrderedDict, not a dict: evicting the oldest of
        # a dict (``next(iter(d))`` then ``pop``) scans the deleted slots at the front of its
        # entry table, which grow until the next resize, so it cost O(window) per delivery once
        # the window was full (64% of a catch-up's busy samples at 200,000 events).
        self._recent: OrderedDict[str, int] = OrderedDict()
        self._window = window
        self._bounded = bounded
        #: Every delivered id with a Lamport timestamp above this is in memory; -1: all are.
        self.floor = -1
        # Per sender: every delivered id of that sender above max(its floor, ``_base``) is in
        # memory. ``_base`` takes what has no sender's floor: ids evicted whose sender is not
        # known (loaded from the persisted log), and the floors dropped to keep at most
        # ``window`` senders (least recently raised first): an id below it is asked about.
        self._per_sender = per_sender and bounded
        self._senders: dict[str, str] = {}
        self._floors: OrderedDict[str, int] = OrderedDict()
        self._base = -1
        #: Requests made (``DeliveredNeeded`` raised or ``reads_for`` asked): for tests/metrics.
        self.lookups = 0
        #: Deliveries into memory so far (a request's ``epoch``).
        self.added = 0
        # The driver's latest answer (id -> delivered), valid until the next one replaces it.
        self._answers: dict[str, bool] = {}

    @property
    def bounded(self) -> bool:
        return self._bounded

    @property
    def complete(self) -> bool:
        """True while memory holds the whole log (nothing evicted or left on disk)."""
        return self.floor < 0

    def __len__(self) -> int:
        """Ids in memory (the whole log only while ``complete``)."""
        return len(self._recent)

    def __bool__(self) -> bool:
        return bool(self._recent) or not self.complete

    @property
    def memory(self) -> Mapping[str, int]:
        """The ids in memory (id -> Lamport time), for membership tests in bulk."""
        return self._recent

    def in_memory(self, mid: str) -> bool:
        return mid in self._recent

    def lamport(self, mid: str) -> int | None:
        return self._recent.get(mid)

    def items(self) -> Iterable[tuple[str, int]]:
        return self._recent.items()

    def floor_for(self, sender: str | None) -> int:
        """Every delivered id of ``sender`` (None: of anyone) with a Lamport timestamp above
        this is in memory."""
        if sender is None or not self._per_sender:
            return self.floor
        own = self._floors.get(sender, -1)
        return own if own > self._base else self._base

    def add(self, mid: str, lamport: int, sender: str | None = None) -> None:
        recent = self._recent
        recent[mid] = lamport
        self.added += 1
        if self._per_sender and sender is not None:
            self._senders[mid] = sender
        if self._bounded and len(recent) > self._window:
            # The oldest delivery leaves memory; the store holds it (or its write is queued).
            old, old_lamport = recent.popitem(last=False)
            self._evicted(old, old_lamport)
            if old in self._answers:
                self._answers[old] = True  # an answer taken before it was delivered

    def _evicted(self, mid: str, lamport: int) -> None:
        self.floor = max(self.floor, lamport)
        if not self._per_sender:
            return
        sender = self._senders.pop(mid, None)
        if sender is None:
            self._base = max(self._base, lamport)
            return
        floors = self._floors
        # Re-inserted: the order is by the last raise, the least recently raised go first.
        floors[sender] = max(floors.pop(sender, -1), lamport)
        if len(floors) > self._window:
            _, dropped = floors.popitem(last=False)
            self._base = max(self._base, dropped)

    def load(self, entries: Sequence[tuple[int, str]], *, truncated: bool) -> None:
        """Fill from the persisted log: ``entries`` (lamport, id) in log order, the newest part
        of the log when ``truncated`` (the rest is on disk, below the oldest loaded)."""
        keep = entries[-self._window :] if self._bounded else entries
        for lamport, mid in keep:
            self._recent[mid] = lamport
        if self._bounded and (truncated or len(keep) < len(entries)) and keep:
            # Ids sharing the oldest loaded timestamp may be on disk only (of any sender).
            self.floor = max(self.floor, keep[0][0])
            self._base = max(self._base, keep[0][0])

    def discard(self, mid: str) -> bool:
        self._answers.pop(mid, None)  # its write failed: no longer in the log
        self._senders.pop(mid, None)
        return self._recent.pop(mid, None) is not None

    def contains(self, mid: str, lamport: int | None = None, sender: str | None = None) -> bool:
        """Is ``mid`` delivered? ``lamport`` (and ``sender``), when known, let memory answer
        above the floor. Raises ``DeliveredNeeded`` when only the store can say."""
        if mid in self._recent:
            return True
        if self.complete or (lamport is not None and lamport > self.floor_for(sender)):
            return False
        return bool(self.known([mid]))

    def known(self, ids: Iterable[str]) -> set[str]:
        """Those of ``ids`` that are delivered, from memory and the driver's answer; raises
        ``DeliveredNeeded`` (nothing changed) for those neither can settle: for a caller that
        asked up front (``reads_for_steps``), where a question left is a bug."""
        got = self.settle(ids)
        if isinstance(got, ReadDelivered):
            raise DeliveredNeeded(got)
        return got

    def settle(self, ids: Iterable[str]) -> set[str] | ReadDelivered:
        """Those of ``ids`` that are delivered, from memory and the driver's answer, or the
        request for those neither can settle (a step asks it before it does anything)."""
        recent, answers = self._recent, self._answers
        wanted = list(dict.fromkeys(ids))
        found = {mid for mid in wanted if mid in recent}
        if self.complete:
            return found
        rest = [mid for mid in wanted if mid not in recent]
        if any(mid not in answers for mid in rest):
            # All of them: the answer replaces the one that settled some.
            self.lookups += 1
            return ReadDelivered(tuple(rest), epoch=self.added)
        found.update(mid for mid in rest if answers[mid])
        return found

    def reads_for(self, ids: Iterable[str], lamports: Mapping[str, int],
                  senders: Mapping[str, str] | None = None) -> ReadDelivered | None:
        """The request that settles every one of ``ids`` for the step about to run (None: the
        index is not bounded). ``lamports`` (and ``senders``): the timestamps (and senders)
        known for some of them (an id above its floor not in memory is not delivered: no
        need to ask)."""
        if not self._bounded:
            return None
        # While memory holds the whole log an id it lacks is not delivered; a long step may
        # evict some and raise the floor, so those answers are kept too.
        recent, floor = self._recent, self.floor
        floor_for = self.floor_for
        by = senders or {}
        ask: list[str] = []
        held: set[str] = set()
        not_held: set[str] = set()
        for mid in dict.fromkeys(ids):
            if mid in recent:
                held.add(mid)
            elif floor < 0 or ((lam := lamports.get(mid)) is not None
                               and lam > floor_for(by.get(mid))):
                not_held.add(mid)
            else:
                ask.append(mid)
        self.lookups += bool(ask)
        return ReadDelivered(tuple(ask), frozenset(held), frozenset(not_held), self.added)

    def reads_for_steps(self, events: Iterable[tuple[str, int | None, Sequence[str], str]]
                        ) -> ReadDelivered | None:
        """One request that settles every delivered-id question the channel's steps for
        ``events`` ((message id, lamport, history ids, sender), say an ingest batch:
        ``deliver_settled``, then ``receive_event`` or ``takes_back`` for each in turn) can
        ask, however the batch goes; None when not bounded. Answer it, then run the steps."""
        if not self._bounded:
            return None
        ids: list[str] = []
        lamports: dict[str, int] = {}
        senders: dict[str, str] = {}
        for mid, lamport, history, sender in events:
            ids.append(mid)
            ids.extend(history)
            senders[mid] = sender
            if lamport is not None:
                lamports[mid] = lamport
        return self.reads_for(ids, lamports, senders)

    def takes_back(self, event: SignedEvent) -> bool:
        """Whether an echo of one of our own events, fetched from a peer, must be stored:
        ``receive`` ignores echoes of our own messages; one the log no longer holds (a wiped
        database, a restore from an older copy) is taken back so the log stays complete."""
        return event.lamport is not None and not self.contains(event.message_id, event.lamport,
                                                               event.sender_id)

    def entries(self) -> list[tuple[int, str]]:
        """(lamport, message_id) in log order: when bounded, only the part in memory (the
        store has the whole log)."""
        return sorted((lamport, mid) for mid, lamport in self._recent.items())

    def answer(self, read: ReadDelivered, found: Collection[str], *, force: bool = False) -> bool:
        """Take the driver's answer to ``read`` (it replaces the previous one). Returns False
        when its "not delivered" answers were dropped: a whole window of deliveries came in
        while the driver read, so one of them may have been delivered and already evicted
        (ask again; ``force`` takes them anyway)."""
        fresh = force or self.added - read.epoch < self._window
        answers: dict[str, bool] = dict.fromkeys(read.held, True)
        if fresh:
            answers.update(dict.fromkeys(read.not_held, False))
        for mid in read.ids:
            if mid in found:
                answers[mid] = True
            elif fresh:
                answers[mid] = False
        self._answers = answers
        return fresh
