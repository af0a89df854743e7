"""Chain head: complete blocks in, canonical chain changes (applied / reverted) out.

Fork choice: the head is the heaviest block connected to the root; among equal weights the
lexicographically smallest hash wins. The rule depends only on the set of blocks, never on their
arrival order, so every consumer that has the same blocks has the same head.

Memory is bounded by ``reorg_threshold``: after each head change, canonical blocks numbered more
than the threshold below the head leave the tree (the newest of them becomes the root, and their
refs stay in a bounded history for deep Reorg messages) and every other block that far behind is
evicted, with its subtree.
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


def _beats(a: BlockPayload | BlockRef, b: BlockPayload | BlockRef) -> bool:
    return a.weight > b.weight or (a.weight == b.weight and a.hash < b.hash)


def _ref(block: BlockPayload) -> BlockRef:
    return BlockRef(block.hash, block.number, block.weight)


class ChainTracker:
    """The block tree above the root, the canonical chain and the fork choice."""

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
        self._nodes: dict[bytes, _Node] = {}
        self._waiting: dict[bytes, list[bytes]] = {}
        self._canon: deque[bytes] = deque()
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
        """The retained canonical blocks, oldest first."""
        return [self._nodes[h].block for h in self._canon]

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
        if self.knows(block_hash):
            return
        node = self._nodes[block_hash] = _Node(block)
        heapq.heappush(self._heap, (block.number, block_hash))
        if len(self._nodes) > self.max_blocks + len(self._canon) and self._evict_highest(block):
            return
        parent = self._parent_ref(block.parent)
        if parent is None:
            self._waiting.setdefault(block.parent, []).append(block_hash)
            return
        if block.number <= parent.number:
            self._reject(node, "block number not above its parent's")
            return
        self._connect(node)

    def _parent_ref(self, parent_hash: bytes) -> BlockRef | BlockPayload | None:
        if parent_hash == self.root.hash:
            return self.root
        parent = self._nodes.get(parent_hash)
        if parent is not None and parent.connected:
            return parent.block
        return None

    def _reject(self, node: _Node, reason: str) -> None:
        del self._nodes[node.block.hash]
        self._dead[node.block.hash] = node.block.number
        self.stats.failed += 1
        self.events.append(BlockFailed(node.block.hash, reason))

    def _connect(self, start: _Node) -> None:
        best: _Node | None = None
        stack = [start]
        while stack:
            node = stack.pop()
            node.connected = True
            block = node.block
            parent = self._nodes.get(block.parent)
            if parent is not None:
                parent.children.append(block.hash)
            if best is None or _beats(block, best.block):
                best = node
            for child_hash in self._waiting.pop(block.hash, ()):
                child = self._nodes.get(child_hash)
                if child is None:
                    continue
                if child.block.number <= block.number:
                    self._reject(child, "block number not above its parent's")
                else:
                    stack.append(child)
        if best is not None and _beats(best.block, self.head):
            self._switch_to(best)

    def _switch_to(self, target: _Node) -> list[bytes]:
        """Make ``target`` the head; returns the hashes of the reverted blocks."""
        path = []
        node: _Node | None = target
        while node is not None and not node.canonical:
            path.append(node)
            node = self._nodes.get(node.block.parent)
        fork = node.block.hash if node is not None else self.root.hash
        reverted = []
        while self._canon and self._canon[-1] != fork:
            old = self._nodes[self._canon.pop()]
            old.canonical = False
            heapq.heappush(self._heap, (old.block.number, old.block.hash))
            reverted.append(old.block.hash)
            self.events.append(BlockReverted(old.block.hash, old.block.number, old.block))
        for node in reversed(path):
            node.canonical = True
            self._canon.append(node.block.hash)
            self.events.append(BlockApplied(node.block))
        self._prune()
        return reverted

    # -----------------------------------------------------------------------------------------
    # bounded memory

    def _prune(self) -> None:
        cutoff = self.head.number - self.reorg_threshold
        nodes = self._nodes
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
            reverted = self._switch_to(target)
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
                self._connect(orphan)
        return True

    def _revert_to_history(self, ancestor: bytes) -> list[bytes]:
        reverted = []
        while self._canon:
            old = self._nodes[self._canon.pop()]
            old.canonical = False
            reverted.append(old.block.hash)
            self.events.append(BlockReverted(old.block.hash, old.block.number, old.block))
        while True:
            block_hash, ref = self._history.popitem()
            if block_hash == ancestor:
                self._history[block_hash] = ref
                self.root = ref
                break
            self._dead[block_hash] = ref.number
            self.events.append(BlockReverted(block_hash, ref.number, None))
        return reverted

    def _elect(self, candidates: set[bytes]) -> None:
        best: _Node | None = None
        for block_hash in candidates:
            node = self._nodes[block_hash]
            if best is None or _beats(node.block, best.block):
                best = node
        if best is not None and _beats(best.block, self.head):
            self._switch_to(best)
