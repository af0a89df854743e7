"""A hypothesis state machine over three SQL replicas (``node.apps.db_app`` on SQLite, and on
PostgreSQL with SYNCNODE_TEST_PG): each receives the same schema versions, writes and deletes
in its own interleaving, with duplicates and random batch sizes, under the bounds (two
versions, two tables) and tombstone compaction. Once everything is delivered all three hold
identical tables and state, equal to the reference ``MemoryReplica``'s."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule
from sqlalchemy import Engine, make_url, text

from node.config.apps import DbSection
from storage import EventRecord, append_events, make_engine
from sync.crdt import decode_content
from sync.errors import RemoteProtocolError
from sync.sds import decode_event
from tests.harness.db_helpers import (
    CAROL,
    DECLARED,
    RECEIVED_AT,
    SCHEMAS,
    Replica,
    memory_of,
    upgraded,
    wipe,
)
from tests.node.test_db_app import declarations, operations
from tests.storage.conftest import BACKENDS, PG_URL

WINDOW = 4
BOUNDS = {"max_schema_versions": 2, "max_tables": 2}
# The application compacts when it has caught up with its log; whether the window holds for
# the deliveries so far is the test's knowledge, so each apply gets the section that compacts
# only when it does (as ``MemoryReplica.compact`` is called only then in the pure machine).
COMPACTING = DbSection(tables=SCHEMAS, stability_window=WINDOW, **BOUNDS)
HOLDING = DbSection(tables=SCHEMAS, stability_window=0, **BOUNDS)
# A malformed event: delivered last, it makes every replica apply (and so compact) once more.
LAST = CAROL.event(0, b"{}")


@pytest.fixture(scope="module", params=BACKENDS)
def machine_engines(request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Engine]]:
    """Three databases at once: SQLite files, or three schemas of the PostgreSQL database."""
    if request.param == "sqlite":
        base: Path = tmp_path_factory.mktemp("machine")
        urls = [f"sqlite:///{base / f'm{i}.db'}" for i in range(3)]
        admin = None
    else:
        admin = make_engine(PG_URL)
        with admin.begin() as conn:
            for i in range(3):
                conn.execute(text(f"DROP SCHEMA IF EXISTS machine_{i} CASCADE"))
                conn.execute(text(f"CREATE SCHEMA machine_{i}"))
        urls = [make_url(PG_URL).update_query_dict({"options": f"-csearch_path=machine_{i}"})
                .render_as_string(hide_password=False) for i in range(3)]
    with upgraded(urls) as engines:
        yield engines
    if admin is not None:
        with admin.begin() as conn:
            for i in range(3):
                conn.execute(text(f"DROP SCHEMA machine_{i} CASCADE"))
        admin.dispose()


def table_of(record: EventRecord) -> str | None:
    content = decode_event(record.wire, verify_signature=False).content
    try:
        return decode_content(content, timestamp=record.lamport, sender=record.sender).table
    except RemoteProtocolError:
        return None


class SqlInterleavings(RuleBasedStateMachine):
    engines: ClassVar[list[Engine]] = []  # set by the test, per backend

    @initialize(pool=st.lists(declarations(), max_size=4).flatmap(
        lambda ds: st.lists(operations(), min_size=3, max_size=20).map(
            lambda ws: [*DECLARED, *ds, *ws])))
    def setup(self, pool: list[EventRecord]) -> None:
        self.pool = pool
        self.tables = [table_of(r) for r in pool]
        self.replicas = []
        for engine in self.engines:
            wipe(engine)
            self.replicas.append(Replica(engine, HOLDING, declared=False))
        self.pending = [set(range(len(pool))) for _ in range(3)]
        self.delivered: list[set[int]] = [set() for _ in range(3)]

    def stable_after(self, r: int, delivered: list[int]) -> bool:
        """Whether every item still pending for ``r`` is newer than the horizon its tables
        may reach with ``delivered``. The newest accepted write is at most the newest of all
        items delivered so far (a declaration re-derives a table from every write in the log)."""
        self.delivered[r].update(delivered)
        high: dict[str, int] = {}
        for i in self.delivered[r]:
            table = self.tables[i]
            if table is not None:
                high[table] = max(high.get(table, 0), self.pool[i].lamport)
        return all(self.pool[i].lamport > high.get(table, 0) - WINDOW
                   for i in self.pending[r] if (table := self.tables[i]) is not None)

    @rule(r=st.integers(0, 2), data=st.data(), count=st.integers(1, 4),
          batch=st.integers(1, 3))
    def deliver(self, r: int, data: st.DataObject, count: int, batch: int) -> None:
        picked = []
        for _ in range(count):
            if self.pending[r] and data.draw(st.integers(0, 5)):
                index = data.draw(st.sampled_from(sorted(self.pending[r])))
                self.pending[r].discard(index)
            else:
                index = data.draw(st.integers(0, len(self.pool) - 1))  # a duplicate
            picked.append(index)
        replica = self.replicas[r]
        with replica.engine.begin() as conn:
            append_events(conn, [self.pool[i] for i in picked], RECEIVED_AT)
        replica.app.section = COMPACTING if self.stable_after(r, picked) else HOLDING
        replica.apply_new(batch)

    def teardown(self) -> None:
        if not hasattr(self, "pool"):
            return
        for r, replica in enumerate(self.replicas):
            rest = [self.pool[i] for i in sorted(self.pending[r])]
            with replica.engine.begin() as conn:
                append_events(conn, [*rest, LAST], RECEIVED_AT)
            replica.app.section = COMPACTING
            replica.apply_new(3)
        expected = memory_of(self.pool, WINDOW, max_versions=2, max_tables=2)
        for replica in self.replicas:
            assert replica.states() == expected.state()
            assert replica.tables() == expected.tables()


@pytest.mark.slow
def test_sql_replicas_converge_over_interleavings(machine_engines: list[Engine]) -> None:
    SqlInterleavings.engines = machine_engines
    run = SqlInterleavings.TestCase
    run.settings = settings(max_examples=50, stateful_step_count=25, deadline=None)
    run("runTest").runTest()
