"""What the node's readers of commits pull: the next commit, and which channels commits touched.

The store's commit observers are fixed when it is built (``EventStore(observers=...)``); the
daemon gives it this one (with the snapshot scheduler's count, when [spark] is on), and the
readers pull from it: the API's long polls and the applications wait on :meth:`next_commit`,
an application steps only when :meth:`stamp` of its channels moved. Nothing registers into the
store or into this object after they are built.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import trio

from storage import AppendResult, EventRecord

__all__ = ["CommitObserver", "CommitSignal"]

#: Told of each commit by the store's writer task, in the trio thread: what was new, and the
#: batch's records. Observers only count and signal; they never call into a core.
CommitObserver = Callable[[AppendResult, Sequence[EventRecord]], None]


class CommitSignal:
    """A trio event set at each commit that stores something, and per channel a count of those
    commits that held a record of it."""

    def __init__(self) -> None:
        self._next = trio.Event()
        self._stored: Counter[str] = Counter()

    def committed(self, result: AppendResult, records: Sequence[EventRecord]) -> None:
        """The store's observer (a :data:`CommitObserver`)."""
        if not result.inserted:
            return
        self._next.set()
        self._next = trio.Event()
        self._stored.update({r.channel for r in records})

    def next_commit(self) -> trio.Event:
        """An event set at the next commit that stores something new."""
        return self._next

    def stamp(self, channels: Iterable[str]) -> int:
        """Changes exactly when a commit that stored something held a record of ``channels``."""
        return sum(self._stored[c] for c in channels)
