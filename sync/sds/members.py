"""How many members a channel has, as SDS-R's response groups need it (``N div 128 + 1``).

The channel counts the distinct senders of valid (signed) messages heard within a window; the
node may add its own estimate (``MemberEstimate.set_external``: say, the peers subscribed to
the channel's topic) and the larger of the two counts. Both are bounded: the tracked senders by
``max_members_tracked`` (the least recently heard dropped first), so a flood of fresh keys costs
a fixed amount of memory and can at most push G up to ``max_members_tracked div 128 + 1``; the
cost of an inflated G is that fewer members answer a repair (the original sender always does),
never a wrong delivery.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["MemberEstimate", "response_groups"]


def response_groups(members: int, group_size: int) -> int:
    """The spec's recommendation: ``N div group_size + 1`` groups (one below ``group_size``)."""
    return max(0, members) // group_size + 1


class MemberEstimate:
    """Distinct senders heard within ``window`` seconds, at most ``cap`` of them."""

    def __init__(self, window: float, cap: int) -> None:
        self.window = window
        self.cap = cap
        #: sender -> when last heard, least recently heard first.
        self._seen: OrderedDict[str, float] = OrderedDict()
        self.external = 0

    def set_external(self, members: int) -> None:
        """The node's own estimate of the channel's members (e.g. peers subscribed to its
        topic); the count is the larger of it and the senders heard recently."""
        self.external = max(0, members)

    def heard(self, sender: str, now: float) -> None:
        seen = self._seen
        try:  # (a known sender, the common case, in one lookup: every reception calls this)
            seen.move_to_end(sender)
        except KeyError:
            if len(seen) >= self.cap:
                seen.popitem(last=False)
        seen[sender] = now

    def count(self, now: float) -> int:
        """Members now: the senders heard within the window (the node's estimate if larger)."""
        seen, horizon = self._seen, now - self.window
        while seen:
            first = next(iter(seen))
            if seen[first] >= horizon:
                break
            del seen[first]
        return max(len(seen), self.external)

    def __len__(self) -> int:
        return len(self._seen)
