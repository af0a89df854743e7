"""Reassembly of block payloads from their messages (the spec's consumer rules).

One :class:`_Assembly` per block hash tracks the Batch, the prefix counters, the sub batches and
the messages that arrived before what they depend on. A single ``outstanding`` integer (prefix
messages + missing SubBatchHeaders + missing SubBatchMsgs) makes the completion test O(1).
Producer disagreements never raise: they drop the block and report a failure reason.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import cast

from sync.cardinal.codec import (
    Batch,
    BatchDeleteMsg,
    BatchMsg,
    SubBatchHeader,
    SubBatchMsg,
)
from sync.cardinal.events import BlockFailed, ConsumerStats
from sync.cardinal.payload import BlockPayload, SubBatch

__all__ = ["Assembler"]

BlockMessage = Batch | SubBatchHeader | SubBatchMsg | BatchMsg | BatchDeleteMsg


class _Conflict(Exception):
    """Internal: the messages of one block contradict each other."""


class _Layout:
    """One producer's SubBatchHeader count and SubBatchMsgs for one sub batch."""

    __slots__ = ("count", "items")

    def __init__(self) -> None:
        self.count: int | None = None
        self.items: dict[int, SubBatchMsg] = {}


class _Sub:
    """A sub batch, assembled per producer: redundant producers may chunk it differently (the
    Go reference and ours do), and any one producer's complete set completes it."""

    __slots__ = ("deletes", "done", "layouts", "name", "tracked", "updates")

    def __init__(self, name: str, tracked: bool) -> None:
        self.name = name
        self.tracked = tracked
        self.layouts: dict[str | None, _Layout] = {}
        self.done = False
        self.updates: dict[str, bytes] = {}
        self.deletes: set[str] = set()

    def agrees(self, msg: SubBatchMsg) -> bool:
        """Whether a SubBatchMsg (of any producer's chunking) fits the completed content."""
        return self.deletes.issuperset(msg.deletes) and all(
            self.updates.get(k) == v for k, v in msg.updates.items()
        )


# Producers whose pieces of one sub batch are held at once; the rest wait for a later resend.
MAX_LAYOUTS_PER_SUB_BATCH = 8


class _Assembly:
    __slots__ = (
        "batch",
        "counters",
        "deletes",
        "early",
        "flagged",
        "ignored",
        "lengths",
        "outstanding",
        "subs",
        "values",
    )

    def __init__(self) -> None:
        self.batch: Batch | None = None
        self.early: list[tuple[BlockMessage, str | None]] = []
        self.values: dict[str, bytes] = {}
        self.deletes: set[str] = set()
        self.counters: dict[str, int] = {}
        self.ignored: frozenset[str] = frozenset()
        self.lengths: tuple[int, ...] = ()
        self.subs: dict[bytes, _Sub] = {}
        self.outstanding = 0
        self.flagged = False


class Assembler:
    """Turns messages into complete payloads; knows nothing about chains.

    ``cutoff``: Batches numbered below it are too old and dropped (the consumer keeps it at
    head number - reorg threshold). ``closed`` remembers finished hashes (completed, failed,
    evicted, too old) for ``retain`` more blocks, so that their late copies are dropped at once;
    a completed block's assembly is kept while it is above the cutoff, to check late copies
    against it.
    """

    def __init__(
        self,
        stats: ConsumerStats,
        tracked: Callable[[str], bool] | None = None,
        max_early_messages: int = 100_000,
        max_pending_blocks: int = 10_000,
        retain: int = 4096,
    ) -> None:
        self.stats = stats
        self._tracked = tracked
        self._max_early = max_early_messages
        self._max_pending = max_pending_blocks
        self._retain = retain
        self._early_total = 0
        # Batch-less assemblies, oldest first, with the cutoff at the time they were created.
        self._early_born: dict[bytes, int] = {}
        self._blocks: dict[bytes, _Assembly] = {}
        self._by_number: list[tuple[int, bytes]] = []
        # hash -> (number, the finished assembly if it completed): late copies of a completed
        # block's messages are checked against what it was assembled from.
        self.closed: dict[bytes, tuple[int, _Assembly | None]] = {}
        self.cutoff = -1
        self.failures: list[BlockFailed] = []
        self._closed_floor = 1024

    def __len__(self) -> int:
        return len(self._blocks)

    # -----------------------------------------------------------------------------------------

    def add(self, msg: BlockMessage, source: str | None = None) -> BlockPayload | None:
        """Process one message from producer ``source`` (None: unnamed); returns the payload it
        completed, if any."""
        block_hash = msg.hash
        closed = self.closed.get(block_hash)
        if closed is not None:
            self.stats.duplicates += 1
            done = closed[1]
            if done is not None and not done.flagged:
                reason = self._contradiction(done, msg)
                if reason is not None:
                    # Reported once per block: the block stays applied, the app decides.
                    done.flagged = True
                    self.failures.append(BlockFailed(block_hash, reason, True))
            return None
        asm = self._blocks.get(block_hash)
        if asm is None:
            asm = self._blocks[block_hash] = _Assembly()
            self._early_born[block_hash] = self.cutoff
        kind = type(msg)
        try:
            if kind is Batch:
                return self._on_batch(asm, cast(Batch, msg))
            if asm.batch is None:
                self._queue_early(asm, msg, source)
                return None
            if kind is BatchMsg:
                # The hot path (most messages), inlined from _apply.
                key, value = cast(BatchMsg, msg).key, cast(BatchMsg, msg).value
                old = asm.values.get(key)
                if old is not None:
                    if old != value:
                        raise _Conflict(f"two values for key {key!r}")
                    self.stats.duplicates += 1
                    return None
                if self._take(asm, key):
                    asm.values[key] = value
            else:
                self._apply(asm, msg, source)
        except _Conflict as exc:
            self._fail(block_hash, str(exc))
            return None
        if asm.outstanding == 0:
            return self._complete(asm)
        return None

    def _drop(self, block_hash: bytes) -> _Assembly | None:
        asm = self._blocks.pop(block_hash, None)
        if asm is not None:
            self._early_total -= len(asm.early)
            self._early_born.pop(block_hash, None)
        return asm

    def _fail(self, block_hash: bytes, reason: str) -> None:
        asm = self._drop(block_hash)
        number = asm.batch.number if asm is not None and asm.batch is not None else -1
        self.closed[block_hash] = (number, None)
        self.stats.failed += 1
        self.failures.append(BlockFailed(block_hash, reason))

    def _queue_early(self, asm: _Assembly, msg: BlockMessage, source: str | None) -> None:
        if self._early_total >= self._max_early:
            self._evict_early()
        asm.early.append((msg, source))
        self._early_total += 1
        self.stats.queued_early += 1

    def _evict_early(self) -> None:
        # Oldest first: without a Batch there is no block number to age them by.
        block_hash = next(iter(self._early_born))
        asm = self._drop(block_hash)
        if asm is not None:
            self.stats.evicted_early += len(asm.early)

    def _on_batch(self, asm: _Assembly, batch: Batch) -> BlockPayload | None:
        if asm.batch is not None:
            if batch != asm.batch:
                raise _Conflict("conflicting Batch")
            self.stats.duplicates += 1
            return None
        if batch.number < self.cutoff:
            self._drop(batch.hash)
            self.closed[batch.hash] = (batch.number, None)
            self.stats.too_old += 1 + len(asm.early)
            return None
        tracked = self._tracked
        asm.batch = batch
        self._early_born.pop(batch.hash, None)
        if len(self._blocks) - len(self._early_born) > self._max_pending:
            self._evict_highest()
        if tracked is None:
            asm.values = dict(batch.values)
            asm.deletes = set(batch.deletes)
            asm.counters = dict(batch.counts)
        else:
            asm.values = {k: v for k, v in batch.values.items() if tracked(k)}
            asm.deletes = {k for k in batch.deletes if tracked(k)}
            asm.counters = {k: c for k, c in batch.counts.items() if tracked(k)}
            asm.ignored = frozenset(k for k in batch.counts if k not in asm.counters)
        asm.lengths = tuple(sorted({len(p) for p in batch.counts}))
        asm.outstanding = sum(asm.counters.values())
        for name, batch_id in batch.subbatches.items():
            is_tracked = tracked is None or tracked(name)
            asm.subs[batch_id] = _Sub(name, is_tracked)
            asm.outstanding += is_tracked
        heapq.heappush(self._by_number, (batch.number, batch.hash))
        if asm.batch is None:  # evicted itself: it was the furthest ahead
            return None
        early, asm.early = asm.early, []
        self._early_total -= len(early)
        for msg, source in early:  # never a Batch: those are handled on arrival
            self._apply(asm, msg, source)
        if asm.outstanding == 0:
            return self._complete(asm)
        return None

    def _apply(self, asm: _Assembly, msg: BlockMessage, source: str | None) -> None:
        kind = type(msg)
        if kind is BatchMsg:
            batch_msg = cast(BatchMsg, msg)
            old = asm.values.get(batch_msg.key)
            if old is not None:
                if old != batch_msg.value:
                    raise _Conflict(f"two values for key {batch_msg.key!r}")
                self.stats.duplicates += 1
            elif self._take(asm, batch_msg.key):
                asm.values[batch_msg.key] = batch_msg.value
        elif kind is BatchDeleteMsg:
            key = cast(BatchDeleteMsg, msg).key
            if key in asm.deletes:
                self.stats.duplicates += 1
            elif self._take(asm, key):
                asm.deletes.add(key)
        elif kind is SubBatchHeader:
            self._on_header(asm, cast(SubBatchHeader, msg), source)
        else:
            self._on_sub_msg(asm, cast(SubBatchMsg, msg), source)

    def _evict_highest(self) -> None:
        # Overload only (a flood of Batches far ahead of the head): drop the furthest one.
        numbers = ((a.batch.number, h) for h, a in self._blocks.items() if a.batch is not None)
        number, block_hash = max(numbers)
        asm = self._drop(block_hash)
        if asm is not None:
            asm.batch = None
        self.closed[block_hash] = (number, None)
        self.stats.evicted_pending += 1

    def _take(self, asm: _Assembly, key: str) -> bool:
        """Decrement the counter of ``key``'s prefix; False if the prefix is not tracked."""
        counters = asm.counters
        for length in asm.lengths:
            prefix = key[:length]
            remaining = counters.get(prefix)
            if remaining is not None:
                if remaining == 0:
                    raise _Conflict(f"more messages than counted for prefix {prefix!r}")
                counters[prefix] = remaining - 1
                asm.outstanding -= 1
                return True
            if prefix in asm.ignored:
                self.stats.untracked += 1
                return False
        raise _Conflict(f"key {key!r} has no prefix announced in the Batch")

    def _sub_of(self, asm: _Assembly, batch_id: bytes) -> _Sub | None:
        sub = asm.subs.get(batch_id)
        if sub is None:
            raise _Conflict("message for a sub batch the Batch does not announce")
        if not sub.tracked:
            self.stats.untracked += 1
            return None
        return sub

    def _layout_of(self, sub: _Sub, source: str | None) -> _Layout | None:
        layout = sub.layouts.get(source)
        if layout is None:
            if len(sub.layouts) >= MAX_LAYOUTS_PER_SUB_BATCH:
                self.stats.excess_producers += 1
                return None
            layout = sub.layouts[source] = _Layout()
        return layout

    def _on_header(self, asm: _Assembly, msg: SubBatchHeader, source: str | None) -> None:
        sub = self._sub_of(asm, msg.batch_id)
        if sub is None:
            return
        if sub.done:
            self.stats.duplicates += 1
            return
        layout = self._layout_of(sub, source)
        if layout is None:
            return
        if layout.count is not None:
            if layout.count != msg.item_count:
                raise _Conflict("two item counts for one sub batch from one producer")
            self.stats.duplicates += 1
            return
        if any(index >= msg.item_count for index in layout.items):
            raise _Conflict("sub batch message index beyond the item count")
        layout.count = msg.item_count
        self._check_layout(asm, sub, layout)

    def _on_sub_msg(self, asm: _Assembly, msg: SubBatchMsg, source: str | None) -> None:
        sub = self._sub_of(asm, msg.batch_id)
        if sub is None:
            return
        if sub.done:
            if not sub.agrees(msg):
                raise _Conflict("sub batch message disagrees with the completed sub batch")
            self.stats.duplicates += 1
            return
        layout = self._layout_of(sub, source)
        if layout is None:
            return
        old = layout.items.get(msg.index)
        if old is not None:
            if old != msg:
                raise _Conflict("two contents for one sub batch message from one producer")
            self.stats.duplicates += 1
            return
        if layout.count is not None and msg.index >= layout.count:
            raise _Conflict("sub batch message index beyond the item count")
        layout.items[msg.index] = msg
        self._check_layout(asm, sub, layout)

    @staticmethod
    def _check_layout(asm: _Assembly, sub: _Sub, layout: _Layout) -> None:
        if layout.count is None or len(layout.items) != layout.count:
            return
        # Index order, so a key updated twice ends with the same value everywhere.
        for index in range(layout.count):
            item = layout.items[index]
            sub.deletes.update(item.deletes)
            sub.updates.update(item.updates)
        sub.done = True
        sub.layouts.clear()
        asm.outstanding -= 1

    def _contradiction(self, asm: _Assembly, msg: BlockMessage) -> str | None:
        """Why a late copy disagrees with the completed ``asm`` (None if it agrees)."""
        kind = type(msg)
        if kind is Batch:
            return None if msg == asm.batch else "conflicting Batch"
        if kind is BatchMsg or kind is BatchDeleteMsg:
            assert isinstance(msg, BatchMsg | BatchDeleteMsg)
            if isinstance(msg, BatchMsg):
                known = asm.values.get(msg.key)
                if known == msg.value:
                    return None
                if known is not None:
                    return f"two values for key {msg.key!r}"
            elif msg.key in asm.deletes:
                return None
            if any(msg.key[:n] in asm.ignored for n in asm.lengths):
                return None
            return f"key {msg.key!r} is not part of the completed block"
        assert isinstance(msg, SubBatchHeader | SubBatchMsg)
        sub = asm.subs.get(msg.batch_id)
        if sub is None:
            return "message for a sub batch the Batch does not announce"
        if not sub.tracked:
            return None
        if isinstance(msg, SubBatchHeader):
            return None  # another producer may chunk the same content differently
        return None if sub.agrees(msg) else "sub batch message disagrees with the completed block"

    def _complete(self, asm: _Assembly) -> BlockPayload:
        batch = asm.batch
        assert batch is not None
        del self._blocks[batch.hash]
        self.closed[batch.hash] = (batch.number, asm)
        self.stats.completed += 1
        subs = []
        for batch_id, sub in asm.subs.items():
            if not sub.tracked:
                continue
            updates, deletes = tuple(sorted(sub.updates.items())), tuple(sorted(sub.deletes))
            subs.append(SubBatch(sub.name, batch_id, updates, deletes))
        subs.sort(key=lambda s: s.name)
        return BlockPayload(
            batch.hash,
            batch.number,
            batch.parent,
            batch.weight,
            tuple(sorted(asm.values.items())),
            tuple(sorted(asm.deletes)),
            tuple(subs),
        )

    # -----------------------------------------------------------------------------------------

    def evict_below(self, cutoff: int) -> None:
        """Drop pending blocks numbered below ``cutoff``; forget hashes ``retain`` below it."""
        self.cutoff = cutoff
        heap = self._by_number
        closed = self.closed
        while heap and heap[0][0] < cutoff:
            number, block_hash = heapq.heappop(heap)
            if self._drop(block_hash) is not None:
                closed[block_hash] = (number, None)
                self.stats.evicted_pending += 1
            elif block_hash in closed:
                # Completed and now beyond reorg reach: keep the hash (to drop late copies
                # cheaply) but let the assembled content go.
                closed[block_hash] = (number, None)
        horizon = cutoff - self._retain
        # Messages whose Batch never came: without a number they can only age by head progress.
        born = self._early_born
        while born and next(iter(born.values())) < horizon:
            asm = self._drop(next(iter(born)))
            if asm is not None:
                self.stats.evicted_early += len(asm.early)
        # Amortised: sweep only when ``closed`` has doubled since the last sweep.
        if len(closed) > 2 * self._closed_floor:
            self.closed = {h: v for h, v in closed.items() if v[0] >= horizon}
            self._closed_floor = max(len(self.closed), 1024)

    def reopen(self, keep_closed: Callable[[bytes], bool]) -> None:
        """Forget every closed hash except those ``keep_closed`` accepts."""
        self.closed = {h: v for h, v in self.closed.items() if keep_closed(h)}
