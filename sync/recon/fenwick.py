"""A Fenwick (binary indexed) tree: prefix sums and rank descent over a list of ints."""

from __future__ import annotations

__all__ = ["Fenwick"]


class Fenwick:
    """Prefix sums over per-block values (big ints or counts)."""

    __slots__ = ("tree",)

    def __init__(self, values: list[int]) -> None:
        tree = [0, *values]
        for i in range(1, len(tree)):
            parent = i + (i & -i)
            if parent < len(tree):
                tree[parent] += tree[i]
        self.tree = tree

    def add(self, index: int, delta: int) -> None:
        tree = self.tree
        i = index + 1
        while i < len(tree):
            tree[i] += delta
            i += i & -i

    def prefix(self, index: int) -> int:
        """Sum of values[0:index]."""
        tree = self.tree
        total = 0
        while index:
            total += tree[index]
            index &= index - 1
        return total

    def find(self, rank: int) -> tuple[int, int]:
        """(index, rank within it) of the value holding 0-based position ``rank``."""
        tree = self.tree
        pos = 0
        step = 1 << (len(tree).bit_length())
        while step:
            nxt = pos + step
            if nxt < len(tree) and tree[nxt] <= rank:
                pos = nxt
                rank -= tree[nxt]
            step >>= 1
        return pos, rank
