"""Reading an ``EventStore``'s reports (``node.store.reports``) in tests, as the driver does."""

from __future__ import annotations

import trio

from node.store.events import EventStore
from node.store.reports import Committed, Failed, Queued


class Reports:
    """What the store reported so far, by kind (message ids, in report order)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.queued: list[str] = []
        self.committed: list[str] = []
        self.failed: list[str] = []

    def take(self) -> Reports:
        """Take every report there is now (none is waited for)."""
        while True:
            try:
                report = self.store.reports.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                return self
            if isinstance(report, Queued):
                self.queued += [r.message_id for r in report.records]
            elif isinstance(report, Committed):
                self.committed += [m for _, m in report.result.inserted]
            elif isinstance(report, Failed):
                self.failed += [r.message_id for r in report.records]
