"""A node with few connections asks for peer records every few seconds (default settings).

A home that joined the first public node hears of the members that join that node after it
only at its next peer exchange; with one exchange per ``membership.px_interval_s`` (30 s) it
was cut off for minutes when that node left within the interval (the chaos bench's smoke
found it: a home that joined 12 s before the departure). Below ``membership.low_watermark``
connections the interval is a sixth (``sync.membership.px_schedule``).
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.harness.cluster import wait_for
from tests.harness.inproc import InProcessNode


def asked(node: InProcessNode) -> float:
    """Peer exchanges ``node`` started (on a new connection or on its schedule) that worked."""
    for line in node.get("/metrics").splitlines():
        if line.startswith("syncnode_px_exchanges_total{") and 'role="asked"' in line \
                and 'result="ok"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_two_nodes_on_the_defaults_ask_each_other_every_few_seconds(tmp_path: Path) -> None:
    a = InProcessNode(tmp_path / "a").start()
    b = InProcessNode(tmp_path / "b", "--bootstrap", a.listen_addrs[0])
    try:
        b.start()
        started = time.monotonic()
        # b asks a when it dials it, then on its schedule; a (which b dialled) only on its
        # schedule. At 30 s apart neither would reach these counts within 20 s.
        wait_for(lambda: asked(b) >= 3 and asked(a) >= 2, 20,
                 lambda: f"asked: b {asked(b)}, a {asked(a)} in {time.monotonic() - started:.0f} s")
    finally:
        b.kill()
        a.kill()
