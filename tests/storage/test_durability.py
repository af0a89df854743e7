"""A writer killed with SIGKILL mid-write loses no committed batch and exposes no partial one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from sqlalchemy import func, select

from storage import events, make_engine, upgrade
from tests.conftest import ROOT

BATCH = 200

WRITER = textwrap.dedent(
    """
    import sys, time
    from storage import append_events, make_engine, upgrade
    from tests.storage.conftest import make_record
    engine = make_engine(sys.argv[1])
    upgrade(engine)
    batch, n = int(sys.argv[2]), 0
    while True:
        records = [make_record(n * batch + i, channel=f"batch{n}") for i in range(batch)]
        with engine.begin() as conn:
            append_events(conn, records, received_at=int(time.time() * 1000))
        print(n, flush=True)
        n += 1
    """
)


def test_sigkill_mid_write_keeps_every_committed_batch_whole(db_url: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, db_url, str(BATCH)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    committed: list[int] = []
    deadline = time.monotonic() + 60
    while len(committed) < 8 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        committed.append(int(line))
    # Kill while the writer is inside its next transaction.
    time.sleep(0.003)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    # Lines printed before the kill that we had not read yet are commits too.
    committed.extend(int(line) for line in proc.stdout.read().split())
    assert len(committed) >= 8, "writer did not commit enough batches"

    engine = make_engine(db_url)
    upgrade(engine)
    with engine.connect() as conn:
        per_batch: dict[str, int] = dict(
            conn.execute(select(events.c.channel, func.count()).group_by(events.c.channel)).all()
        )
    engine.dispose()
    for n in committed:
        assert per_batch.get(f"batch{n}") == BATCH, f"committed batch {n} incomplete"
    assert all(count == BATCH for count in per_batch.values()), per_batch
