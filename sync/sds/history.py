"""Causal history of one channel: the DAG heads, the recent log tail and retrieval hints, and
the choice of the ids a message names (docs/sds.md "Causal history" and "Heads").

Heads are delivered messages no delivered message names. They are bounded (docs/sds.md
"Heads"): at most ``max_heads`` (the oldest dropped), and a head expires ``head_ttl`` after it
became one here (its age counts from its delivery here, not from its Lamport time: a message
delivered late, after waiting for a repair, still gets its full time to be named). A content
message names the newest heads and, when there are more heads than it can name, the oldest
one in its last slot, so concurrent messages that nobody would otherwise name are named
(without that slot the heads of a busy group grow without end). A sync message names the
heads least recently named first (a rotation: every head is named within
``max_heads / sync_history_size`` syncs). A head another member names in a sync stays one: a
member that missed that sync (offline then) would never hear of it again. Every operation
costs O(max_heads) or O(log) at most, whatever the log's length.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import random
from collections.abc import Iterable

from sync.sds.message import HistoryRef

__all__ = ["CausalHistory"]

#: ``HistoryRef`` built without its Python-level ``__new__`` (one per delivery).
_tuple_new = tuple.__new__


class CausalHistory:
    def __init__(self, tail_size: int, max_heads: int, head_ttl: float,
                 max_hints: int) -> None:
        self.tail_size = tail_size
        self.max_heads = max_heads
        self.head_ttl_ms = int(head_ttl * 1000)
        self.max_hints = max_hints
        #: Sorted recent (lamport, id) of the log, and their references.
        self.tail: list[tuple[int, str]] = []
        self.tail_refs: dict[str, HistoryRef] = {}
        #: Heads (least recently named first) and their Lamport times; when each became a
        #: head here (ms), and a min-heap of (that, id) with lazy deletion.
        self.heads: dict[str, HistoryRef] = {}
        self.head_lamport: dict[str, int] = {}
        self._since: dict[str, int] = {}
        #: Heads we named in a message of ours at least once (only those expire).
        self._named: set[str] = set()
        self._by_age: list[tuple[int, str]] = []
        #: The latest ``now`` (ms) the channel told us.
        self.now_ms = 0
        self.hints: dict[str, bytes] = {}
        #: Largest number of heads held at once (a figure for the scale benchmark).
        self.heads_peak = 0

    # -- hints ----------------------------------------------------------------------------
    def set_hint(self, message_id: str, hint: bytes) -> None:
        hints = self.hints
        hints[message_id] = hint
        if len(hints) > self.max_hints:
            # Histories name recent messages: the oldest hint goes, as the ids do.
            del hints[next(iter(hints))]
        for refs in (self.heads, self.tail_refs):
            ref = refs.get(message_id)
            if ref is not None:
                refs[message_id] = HistoryRef(message_id, hint, ref.sender_id)

    def knows_hint(self, message_id: str) -> bool:
        return message_id in self.hints

    # -- log ------------------------------------------------------------------------------
    def logged(self, mid: str, lamport: int, sender: str, named: Iterable[str],
               *, head: bool) -> None:
        """A message entered the log: it joins the tail, the ids it names stop being heads,
        and it becomes a head unless ``head`` is false (it was declared lost meanwhile)."""
        ref = _tuple_new(HistoryRef, (mid, self.hints.get(mid), sender))
        tail, tail_refs = self.tail, self.tail_refs
        bisect.insort(tail, (lamport, mid))
        tail_refs[mid] = ref
        if len(tail) > 2 * self.tail_size:
            for _, old in tail[: self.tail_size]:
                tail_refs.pop(old, None)
            del tail[: self.tail_size]
        heads = self.heads
        if heads:
            # drop_head, inlined: this runs for every id of every delivered message.
            head_lamport, since, named_by_us = self.head_lamport, self._since, self._named
            for h in named:
                if heads.pop(h, None) is not None:
                    head_lamport.pop(h, None)
                    since.pop(h, None)
                    named_by_us.discard(h)
        if head:
            self.add_head(ref, lamport)

    def touch(self, now: float) -> None:
        self.now_ms = int(now * 1000)

    def add_head(self, ref: HistoryRef, lamport: int) -> None:
        heads, mid = self.heads, ref.message_id
        heads[mid] = ref
        self.head_lamport[mid] = lamport
        now_ms = self.now_ms
        since = now_ms if now_ms > lamport else lamport
        self._since[mid] = since
        by_age = self._by_age
        heapq.heappush(by_age, (since, mid))
        count = len(heads)
        if count > self.heads_peak:  # (the peak is at most max_heads: both checks are here)
            if count > self.max_heads:
                while len(heads) > self.max_heads:
                    self._pop_oldest()
                count = len(heads)
            if count > self.heads_peak:
                self.heads_peak = count
        if len(by_age) > 4 * count + 64:
            self._by_age = [(since, m) for m, since in self._since.items()]
            heapq.heapify(self._by_age)

    def named_by_others(self, ids: Iterable[str]) -> None:
        """A received sync message named ``ids``: those of our heads go to the back of our
        rotation, so that our next sync names other heads. Without it every member's
        rotation started at the same oldest heads, each sync of the group named the same
        16, and a head beyond them went unnamed for as long as the group stayed quiet (the
        simulator's seed 1 at N=100 with 5% loss: named first after 900 s, so a member that
        had missed it never learned it was missing). Our own naming still decides expiry."""
        heads = self.heads
        for mid in ids:
            ref = heads.pop(mid, None)
            if ref is not None:
                heads[mid] = ref

    def drop_head(self, mid: str) -> None:
        if self.heads.pop(mid, None) is not None:
            self.head_lamport.pop(mid, None)
            self._since.pop(mid, None)
            self._named.discard(mid)

    def _oldest(self) -> tuple[int, str] | None:
        by_age, since = self._by_age, self._since
        while by_age:
            when, mid = by_age[0]
            if since.get(mid) == when:
                return when, mid
            heapq.heappop(by_age)
        return None

    def _pop_oldest(self) -> None:
        oldest = self._oldest()
        if oldest is not None:
            heapq.heappop(self._by_age)
            self.drop_head(oldest[1])

    def expire(self, now: float) -> None:
        """Heads that became heads more than ``head_ttl`` before ``now`` stop being heads,
        once we named them at least once (one we never named gets another ``head_ttl``: the
        rotation of our syncs names it next, so every head is named by every member before
        it expires; ``max_heads`` stays the hard bound)."""
        self.touch(now)
        horizon = self.now_ms - self.head_ttl_ms
        while (oldest := self._oldest()) is not None and oldest[0] < horizon:
            heapq.heappop(self._by_age)
            mid = oldest[1]
            if mid in self._named:
                self.drop_head(mid)
            else:
                self._since[mid] = self.now_ms
                heapq.heappush(self._by_age, (self.now_ms, mid))

    def forget(self, mid: str) -> None:
        self.tail_refs.pop(mid, None)
        self.tail = [item for item in self.tail if item[1] != mid]
        self.drop_head(mid)

    # -- choice ---------------------------------------------------------------------------
    def choose(self, size: int, now: float, *, rotate: bool = False,
               rng: random.Random | None = None) -> tuple[HistoryRef, ...]:
        """Up to ``size`` ids to name, in (lamport, id) order: heads first (a content message
        the newest, and in its last slot, when it cannot name them all, one of the others
        drawn with ``rng`` (the oldest without one); a sync message, ``rotate``, those least
        recently named), then the log's tail.

        Why a draw: members hold nearly the same heads, so a fixed rule (the oldest) makes
        concurrent senders name the same one, and the heads nobody names as newest pile up
        faster than they are named (measured in the simulator: 16 -> 49 heads from a 10 s to
        a 30 s run of 60 members); drawn, concurrent senders name different ones."""
        if size <= 0:
            return ()
        self.expire(now)
        heads, lamports = self.heads, self.head_lamport
        if len(heads) > size and rotate:
            chosen = list(itertools.islice(heads, size))
            for mid in chosen:  # to the back of the rotation
                heads[mid] = heads.pop(mid)
        elif len(heads) > size:
            chosen = heapq.nlargest(size - 1, heads, key=lambda i: (lamports[i], i))
            if rng is None:
                oldest = self._oldest()
                assert oldest is not None
                extra = oldest[1]
                if extra in chosen:
                    chosen = heapq.nlargest(size, heads, key=lambda i: (lamports[i], i))
                else:
                    chosen.append(extra)
            else:
                others = [i for i in heads if i not in chosen]
                chosen.append(others[rng.randrange(len(others))])
        else:
            chosen = list(heads)
        refs = [heads[i] for i in chosen]
        self._named.update(chosen)
        lamport_of = {i: lamports[i] for i in chosen}
        if len(refs) < size:
            for lamport, mid in reversed(self.tail):
                if len(refs) >= size:
                    break
                if mid not in lamport_of:
                    lamport_of[mid] = lamport
                    refs.append(self.tail_refs[mid])
        refs.sort(key=lambda r: (lamport_of[r.message_id], r.message_id))
        return tuple(refs)

    # -- restore --------------------------------------------------------------------------
    def load_tail(self, entries: list[tuple[int, str, str | None]]) -> None:
        """The newest entries of a restored log, sorted by (lamport, id)."""
        for lamport, mid, sender in entries[-self.tail_size:]:
            self.tail.append((lamport, mid))
            self.tail_refs[mid] = HistoryRef(mid, None, sender)

    def load_heads(self, heads: Iterable[tuple[HistoryRef, int]]) -> None:
        """Restored heads with their Lamport times (-1 unknown); the newest log entry if
        none survived."""
        for ref, lamport in heads:
            self.add_head(ref, lamport)
        if not self.heads and self.tail:
            lamport, mid = self.tail[-1]
            self.add_head(self.tail_refs[mid], lamport)
