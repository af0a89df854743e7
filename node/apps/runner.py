"""Applications on the event log (replicated database, block streams).

An application reads the committed log of its channels in storage order and applies each batch
inside one transaction that also advances its cursor (``node_state`` key ``app/<name>/cursor``).
So an application's tables are always the deterministic result of a prefix of the log, a crash
never applies a batch twice or loses one, and a new replica rebuilds its tables by replaying the
log from the start.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import trio
from sqlalchemy import Connection

from node.clock import Clock
from node.store.events import EventStore
from node.store.signal import CommitSignal
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from storage import (
    StoredEvent,
    get_state,
    put_state,
    read_channels_after,
    write_transaction,
)

if TYPE_CHECKING:
    from node.config.settings import Config
    from node.httpkit import ApiRoute
    from node.p2p.standing import PeerStanding
    from node.replication.channels import ChannelService

__all__ = ["AppBundle", "AppHost", "AppPlugin", "AppRunner", "LogApplication"]

log = logging.getLogger("syncnode.apps")
BATCH = 2000


class AppHost(Protocol):
    """What an application and its routes read of the running node: the narrow interface the
    composition root (``node.services``) hands over (``node.runtime.NodeRuntime`` has it)."""

    @property
    def config(self) -> Config: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def store(self) -> EventStore: ...

    @property
    def standing(self) -> PeerStanding | None: ...

    @property
    def peer_id(self) -> str: ...

    def require_channels(self) -> ChannelService: ...

    def commit_signal(self) -> trio.Event: ...

    @property
    def clock(self) -> Clock: ...


class LogApplication(Protocol):
    """What an application implements; ``apply`` runs in a worker thread."""

    name: str
    channels: Sequence[str]

    def restore(self, conn: Connection, cursor: int) -> None:
        """Called once at start, in a worker thread, before any batch: load what the app keeps
        in memory from its committed state (``cursor``: the last seq applied, 0: none), so
        that it serves its tables before anything new arrives."""
        ...

    def apply(self, conn: Connection, batch: Sequence[StoredEvent]) -> None:
        """Apply events (in storage order) within the caller's transaction. Bad content must be
        rejected and counted, never raised: the log is immutable, the batch must go through."""
        ...

    def after_commit(self, batch: Sequence[StoredEvent]) -> None:
        """Called in the trio thread once the batch's transaction committed (notify followers)."""
        ...


def _cursor_key(name: str) -> str:
    return f"app/{name}/cursor"


class AppRunner:
    """Drives one application: after every commit, apply what is new."""

    def __init__(self, app: LogApplication, store: EventStore, metrics: Metrics,
                 commits: CommitSignal, clock: Clock) -> None:
        self.app = app
        self.clock = clock
        self.store = store
        self.metrics = metrics
        self.commits = commits  # the store's commit signal (one of its observers)
        self.cursor = 0
        self.applied = 0
        # The application's channels' stamp at the last step (``CommitSignal.stamp``; -1: step
        # first). A step is a write transaction in a worker thread: taken after every commit
        # of any channel (a hundred publishes a second on `general`), it contended with the
        # publishes for SQLite's write lock and the GIL for nothing.
        self._stamp = -1
        self._stepped_at = -float("inf")

    async def run(self) -> None:
        raw = await self.store.read(get_state, _cursor_key(self.app.name))
        self.cursor = int(raw.decode()) if raw else 0
        try:
            await self.store.read(self.app.restore, self.cursor)
        except Exception:  # the node keeps running; the db application retries with a batch
            self.metrics.inc("app_errors_total", app=self.app.name)
            log.exception("application state not restored", extra=kv(app=self.app.name))
        while True:
            signal = self.commits.next_commit()
            stamp = self.commits.stamp(self.app.channels)
            # Once a second anyway: a write to the log that bypassed the store's writer.
            if stamp != self._stamp or self.clock.now() - self._stepped_at >= 1.0:
                self._stamp = stamp
                self._stepped_at = self.clock.now()
                while await self.step():
                    pass
            with trio.move_on_after(1.0):
                await signal.wait()

    async def step(self) -> bool:
        """Apply one batch; False when there was nothing new."""
        app, cursor = self.app, self.cursor

        def run() -> list[StoredEvent]:
            with write_transaction(self.store.engine) as conn:
                batch = read_channels_after(conn, app.channels, cursor, BATCH)
                if batch:
                    app.apply(conn, batch)
                    put_state(conn, _cursor_key(app.name), str(batch[-1].seq).encode(),
                              batch[-1].received_at)
                return batch

        try:
            batch = await trio.to_thread.run_sync(run)
        except Exception:
            # An application bug must not stop the node; the batch is retried after a pause.
            self.metrics.inc("app_errors_total", app=app.name)
            log.exception("application batch failed", extra=kv(app=app.name, after=cursor))
            await trio.sleep(5)
            return False
        if not batch:
            return False
        self.cursor = batch[-1].seq
        self.applied += len(batch)
        self.metrics.inc("app_events_applied_total", len(batch), app=app.name)
        app.after_commit(batch)
        return True


class AppBundle(Protocol):
    app: LogApplication
    routes: list[ApiRoute]


class AppPlugin(Protocol):
    """An application the daemon can host: declared in ``node.apps.plugins.PLUGINS``."""

    name: str

    def channels(self, config: Config) -> list[str]:
        """Channels the application needs replicated (added to ``p2p.channels``)."""
        ...

    def build(self, runtime: AppHost) -> AppBundle:
        """Create the application for a running node."""
        ...
