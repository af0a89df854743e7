"""Chain head: complete blocks in, canonical chain changes (applied / reverted) out.

The head rule follows the Go reference consumer (docs/cardinal.md, "The head rule"), evaluated
when a block arrives, for the subtree that block completes:

* a block whose parent is the head extends the chain, whatever its weight, and so do the
  already complete descendants of that block along its best branch;
* any other block that links to the known chain (the canonical blocks, the root, or the history
  replayed below the root) replaces the head only if the best tip of its subtree is strictly
  heavier than the head: equal weights keep the head that was there first;
* the best tip of a subtree is the heaviest, then the highest numbered, then the smallest hash.

Each head change is one :class:`ChainUpdated` (after its per-block events), grouped as the
reference groups them: a block completing a branch whose descendants are already complete brings
all of them in one update.

Memory is bounded by ``reorg_threshold``: after each head change, blocks numbered more than the
threshold below the head leave the tree (the newest canonical one becomes the root, and refs stay
in a bounded history for deep Reorg messages) and every other block that far behind is evicted.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque

from sync.cardinal.codec import ZERO_HASH
from sync.cardinal.events import (
    BlockApplied,
    BlockFailed,
    BlockRef,
    BlockReverted,
    ChainUpdated,
    ConsumerEvent,
    ConsumerStats,
)
from sync.cardinal.payload import BlockPayload

__all__ = ["GENESIS", "ChainTracker"]

# The virtual root when no anchor is given: blocks whose parent is the zero hash attach to it,
# and its weight of -1 loses against every real block.
GENESIS = BlockRef(ZERO_HASH, -1, -1)


class _Node:
    __slots__ = ("block", "canonical", "children", "connected")

    def __init__(self, block: BlockPayload) -> None:
        self.block = block
        self.connected = False
        self.canonical = False
        self.children: list[bytes] = []


def _better(a: BlockPayload, b: BlockPayload) -> bool:
    """The order of tips: heavier, then higher numbered (longer), then the smaller hash."""
    if a.weight != b.weight:
        return a.weight > b.weight
    if a.number != b.number:
        return a.number > b.number
    return a.hash < b.hash


def _ref(block: BlockPayload) -> BlockRef:
    return BlockRef(block.hash, block.number, block.weight)


class ChainTracker:
    """The block tree around the root, the canonical chain and the head rule.

    ``_canon``: canonical blocks above the root, oldest first (the last one is the head).
    ``_under``: canonical blocks at and below the root whose payloads are known (the anchor's
    own payload and the history a producer replays below it), oldest first. Branches forking
    there can still win, as in the reference's "start at an anchor" and startup reorg cases.
    """

    def __init__(
        self,
        stats: ConsumerStats,
        anchor: BlockRef | None = None,
        reorg_threshold: int = 128,
        history_limit: int = 4096,
        max_blocks: int = 10_000,
    ) -> None:
        self.stats = stats
        self.max_blocks = max_blocks
        self.root = anchor or GENESIS
        self.reorg_threshold = reorg_threshold
        self.history_limit = history_limit
        self.events: list[ConsumerEvent] = []
        self.quiet = False  # while restoring: link blocks, never move the head
        self._nodes: dict[bytes, _Node] = {}
        self._waiting: dict[bytes, list[bytes]] = {}
        self._canon: deque[bytes] = deque()
        self._under: deque[bytes] = deque()
        self._history: OrderedDict[bytes, BlockRef] = OrderedDict()
        self._dead: dict[bytes, int] = {}
        self._heap: list[tuple[int, bytes]] = []
        self._dead_floor = 1024
        self._history[self.root.hash] = self.root

    # -----------------------------------------------------------------------------------------
    # queries

    @property
    def head(self) -> BlockRef:
        if self._canon:
            return _ref(self._nodes[self._canon[-1]].block)
        return self.root

    def canonical_blocks(self) -> list[BlockPayload]:
        """The retained canonical blocks (history below the root included), oldest first."""
        return [self._nodes[h].block for h in (*self._under, *self._canon)]

    def retained_blocks(self) -> list[BlockPayload]:
        return [node.block for node in self._nodes.values()]

    def history(self) -> list[BlockRef]:
        """Refs of canonical blocks at or below the root, oldest first (bounded)."""
        return list(self._history.values())

    def knows(self, block_hash: bytes) -> bool:
        return block_hash in self._nodes or block_hash in self._history or block_hash in self._dead

    def __len__(self) -> int:
        return len(self._nodes)

    # -----------------------------------------------------------------------------------------
    # complete blocks

    def add(self, block: BlockPayload) -> None:
        block_hash = block.hash
        if block_hash in self._nodes or block_hash in self._dead:
            return
        if block_hash == self.root.hash:
            # The anchor's payload, replayed; not a root that pruning left behind the window.
            in_window = self.root.number >= self.head.number - self.reorg_threshold
            if not self._under and block_hash != ZERO_HASH and in_window:
                self._add_root_payload(block)
            return
        if block_hash in self._history:
            return
        node = self._nodes[block_hash] = _Node(block)
        heapq.heappush(self._heap, (block.number, block_hash))
        retained = self.max_blocks + len(self._canon) + len(self._under)
        if len(self._nodes) > retained and self._evict_highest(block):
            return
        if self._under and block_hash == self._nodes[self._under[0]].block.parent:
            self._waiting.setdefault(block.parent, []).append(block_hash)
            self._extend_under()
            return
        parent_number = self._linked_parent_number(block.parent)
        if parent_number is None:
            self._waiting.setdefault(block.parent, []).append(block_hash)
            return
        if block.number <= parent_number:
            self._reject(node, "block number not above its parent's")
            return
        self._connect(node, evaluate=not self.quiet)

    def _linked_parent_number(self, parent_hash: bytes) -> int | None:
        """The number of ``parent_hash`` if it is linked to the known chain, else None."""
        if parent_hash == self.root.hash:
            return self.root.number
        parent = self._nodes.get(parent_hash)
        if parent is not None and parent.connected:
            return parent.block.number
        return None

    def _add_root_payload(self, block: BlockPayload) -> None:
        """The root's own payload (the anchor, replayed): history, not news."""
        node = self._nodes[block.hash] = _Node(block)
        node.connected = node.canonical = True
        node.children = [h for h, n in self._nodes.items()
                         if n.connected and n.block.parent == block.hash]
        self._under.append(block.hash)
        heapq.heappush(self._heap, (block.number, block.hash))
        self._extend_under()

    def _extend_under(self) -> None:
        """Pull the replayed history below the root into the known chain, and link (without
        judging: they are judged when one of their blocks arrives) what waited on it."""
        while True:
            lowest = self._nodes[self._under[0]]
            below = self._nodes.get(lowest.block.parent)
            if below is None or below.connected:
                break
            siblings = self._waiting.get(below.block.parent)
            if siblings is not None and below.block.hash in siblings:
                siblings.remove(below.block.hash)
                if not siblings:
                    del self._waiting[below.block.parent]
            below.connected = below.canonical = True
            below.children.append(lowest.block.hash)
            self._under.appendleft(below.block.hash)
        for block_hash in list(self._under):
            node = self._nodes[block_hash]
            for child_hash in self._waiting.pop(block_hash, ()):
                child = self._nodes.get(child_hash)
                if child is None or child.canonical:
                    continue
                if child.block.number <= node.block.number:
                    self._reject(child, "block number not above its parent's")
                else:
                    self._connect(child, evaluate=False)

    def _reject(self, node: _Node, reason: str) -> None:
        del self._nodes[node.block.hash]
        self._dead[node.block.hash] = node.block.number
        self.stats.failed += 1
        self.events.append(BlockFailed(node.block.hash, reason))

    def _connect(self, start: _Node, *, evaluate: bool) -> None:
        best: _Node | None = None
        stack = [start]
        while stack:
            node = stack.pop()
            node.connected = True
            block = node.block
            parent = self._nodes.get(block.parent)
            if parent is not None:
                parent.children.append(block.hash)
            if best is None or _better(block, best.block):
                best = node
            for child_hash in self._waiting.pop(block.hash, ()):
                child = self._nodes.get(child_hash)
                if child is None:
                    continue
                if child.block.number <= block.number:
                    self._reject(child, "block number not above its parent's")
                else:
                    stack.append(child)
        if not evaluate or best is None:
            return
        if start.block.parent == self.head.hash or best.block.weight > self.head.weight:
            self._switch_to(best)

    def _is_base(self, block_hash: bytes) -> bool:
        if block_hash == self.root.hash:
            return True
        node = self._nodes.get(block_hash)
        return node is not None and node.canonical

    def _switch_to(self, target: _Node) -> list[bytes]:
        """Make ``target`` the head as one update; returns the hashes of the reverted blocks."""
        path = []
        fork = target.block.hash
        while not self._is_base(fork):
            node = self._nodes[fork]
            path.append(node)
            fork = node.block.parent
        reverted: list[bytes] = []
        removed: list[BlockRef] = []
        while self._canon and self._canon[-1] != fork:
            removed.append(self._revert(self._canon.pop()))
        if not self._canon and fork != self.root.hash:
            # The fork is in the history below the root: the root itself goes too.
            if self.root.hash not in self._nodes:
                self.events.append(BlockReverted(self.root.hash, self.root.number, None))
                removed.append(self.root)
            while self._under and self._under[-1] != fork:
                removed.append(self._revert(self._under.pop()))
            for block_hash in list(reversed(self._history)):
                if block_hash == fork:
                    break
                del self._history[block_hash]
            self.root = _ref(self._nodes[fork].block)
            self._history[fork] = self.root
        reverted = [r.hash for r in removed]
        added = []
        for node in reversed(path):
            node.canonical = True
            self._canon.append(node.block.hash)
            self.events.append(BlockApplied(node.block))
            added.append(node.block.hash)
        if added or removed:
            self.events.append(ChainUpdated(tuple(added), tuple(reversed(reverted))))
        self._prune()
        return reverted

    def _revert(self, block_hash: bytes) -> BlockRef:
        old = self._nodes[block_hash]
        old.canonical = False
        heapq.heappush(self._heap, (old.block.number, block_hash))
        self.events.append(BlockReverted(block_hash, old.block.number, old.block))
        return _ref(old.block)

    # -----------------------------------------------------------------------------------------
    # bounded memory

    def _prune(self) -> None:
        cutoff = self.head.number - self.reorg_threshold
        nodes = self._nodes
        while self._under and nodes[self._under[0]].block.number < cutoff:
            old = nodes.pop(self._under.popleft())
            self._dead[old.block.hash] = old.block.number
            above = self._under[0] if self._under else (self._canon[0] if self._canon else None)
            self._kill([c for c in old.children if c != above], evicted=True)
        while self._canon and nodes[self._canon[0]].block.number < cutoff:
            old = nodes.pop(self._canon.popleft())
            # Branches forking off below the new root could only win through a deep reorg.
            next_hash = self._canon[0] if self._canon else None
            self._kill([c for c in old.children if c != next_hash], evicted=True)
            self.root = _ref(old.block)
            self._history[old.block.hash] = self.root
        while len(self._history) > self.history_limit:
            self._history.popitem(last=False)
        heap = self._heap
        while heap and heap[0][0] < cutoff:
            _, block_hash = heapq.heappop(heap)
            node = nodes.get(block_hash)
            if node is None or node.canonical:
                continue
            if node.connected:
                self._kill([block_hash], evicted=True)
            else:
                del nodes[block_hash]
                self.stats.evicted_blocks += 1
                siblings = self._waiting.get(node.block.parent)
                if siblings is not None:
                    siblings.remove(block_hash)
                    if not siblings:
                        del self._waiting[node.block.parent]
        if len(self._dead) > 2 * self._dead_floor:
            self._dead = {h: n for h, n in self._dead.items() if n >= cutoff}
            self._dead_floor = max(len(self._dead), 1024)

    def _evict_highest(self, new: BlockPayload) -> bool:
        """Overload only: drop the non-canonical block furthest ahead (True if it is ``new``)."""
        victim = max(
            (n for n in self._nodes.values() if not n.canonical),
            key=lambda n: (n.block.number, n.block.hash),
        )
        self.stats.evicted_blocks += 1
        if victim.connected:
            self._kill([victim.block.hash])
        else:
            del self._nodes[victim.block.hash]
            self._dead[victim.block.hash] = victim.block.number
            waiting = self._waiting.get(victim.block.parent, [])
            if victim.block.hash in waiting:
                waiting.remove(victim.block.hash)
        return victim.block is new

    def _kill(self, roots: list[bytes], evicted: bool = False) -> None:
        """Drop blocks and their subtrees; late copies of them will be ignored."""
        stack = list(roots)
        while stack:
            node = self._nodes.pop(stack.pop(), None)
            if node is None:
                continue
            parent = self._nodes.get(node.block.parent)
            if parent is not None and node.block.hash in parent.children:
                parent.children.remove(node.block.hash)
            self._dead[node.block.hash] = node.block.number
            if evicted:
                self.stats.evicted_blocks += 1
            stack.extend(node.children)
            stack.extend(self._waiting.pop(node.block.hash, ()))

    # -----------------------------------------------------------------------------------------
    # deep reorgs

    def reorg_to(self, ancestor: bytes) -> bool:
        """Follow a Reorg message: roll back to ``ancestor`` and abandon the removed chain."""
        target = self._nodes.get(ancestor)
        in_tree = target is not None and target.connected
        if not in_tree and (ancestor not in self._history or ancestor == ZERO_HASH):
            return False
        # Blocks evicted earlier may belong to the new chain; only the removed chain stays dead.
        self._dead.clear()
        if target is not None and in_tree:
            before = len(self.events)
            reverted = self._switch_to(target)
            self._drop_update_summary(before)
            keep_from: bytes | None = target.block.hash
        else:
            reverted = self._revert_to_history(ancestor)
            keep_from = None
        # Whatever does not descend from the ancestor, and the removed chain itself, is dead.
        keep: set[bytes] = set()
        if keep_from is not None:
            stack = [c for c in self._nodes[keep_from].children if c not in reverted]
            while stack:
                block_hash = stack.pop()
                keep.add(block_hash)
                stack.extend(self._nodes[block_hash].children)
        self._kill(
            [h for h, n in self._nodes.items() if n.connected and not n.canonical and h not in keep]
        )
        self._elect(keep)
        for orphan_hash in self._waiting.pop(self.root.hash, ()):
            orphan = self._nodes.get(orphan_hash)
            if orphan is None:
                continue
            if orphan.block.number <= self.root.number:
                self._reject(orphan, "block number not above its parent's")
            else:
                self._connect(orphan, evaluate=True)
        return True

    def _drop_update_summary(self, since: int) -> None:
        # A Reorg message's rollback is reported by ReorgStarted and the per-block events; the
        # blocks of the reorg channel then arrive as ordinary updates.
        self.events[since:] = [e for e in self.events[since:] if not isinstance(e, ChainUpdated)]

    def _revert_to_history(self, ancestor: bytes) -> list[bytes]:
        reverted = []
        for queue in (self._canon, self._under):
            while queue:
                reverted.append(self._revert(queue.pop()).hash)
        while True:
            block_hash, ref = self._history.popitem()
            if block_hash == ancestor:
                self._history[block_hash] = ref
                self.root = ref
                break
            self._dead[block_hash] = ref.number
            if block_hash not in reverted:
                self.events.append(BlockReverted(block_hash, ref.number, None))
        return reverted

    def _elect(self, candidates: set[bytes]) -> None:
        best: _Node | None = None
        for block_hash in candidates:
            node = self._nodes[block_hash]
            if best is None or _better(node.block, best.block):
                best = node
        if best is not None:
            before = len(self.events)
            self._switch_to(best)
            self._drop_update_summary(before)
