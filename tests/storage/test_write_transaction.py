"""Writers take SQLite's write lock when they begin, so read-then-write never fails."""

from __future__ import annotations

import threading
from pathlib import Path

from storage import append_events, count_events, make_engine, upgrade, write_transaction
from tests.storage.conftest import make_record


def test_read_then_write_survives_a_concurrent_commit(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    upgrade(engine)
    read_done = threading.Event()
    errors: list[BaseException] = []

    def other_writer() -> None:
        read_done.wait(10)
        try:
            with write_transaction(engine) as conn:  # waits for the first writer
                append_events(conn, [make_record(1)], received_at=0)
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=other_writer)
    thread.start()
    with write_transaction(engine) as conn:
        before = count_events(conn)
        read_done.set()
        thread.join(0.5)  # give the other writer time to try (it must block, not win)
        append_events(conn, [make_record(2)], received_at=0)
    thread.join(30)
    assert not errors, errors
    with engine.connect() as conn:
        assert before == 0 and count_events(conn) == 2
    engine.dispose()
