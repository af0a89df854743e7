"""``join`` dials the address it is given, checks the peer id there, and stores only what worked;
``/dns4`` addresses resolve; ``peers forget`` drops a peer for good. (The CLI under test runs
as a process; the nodes run in this process, B's restarts being clean stops and starts on its
data dir.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.harness.cluster import metric, wait_for
from tests.harness.inproc import InProcessNode
from tests.harness.procs import start_all
from tests.node.test_cli_errors import assert_one_error


def _connected(node: InProcessNode) -> set[str]:
    return {p["peer_id"] for p in node.get("/v1/peers")["connected"]}


def _wait_connected(node: InProcessNode, peer_id: str, timeout: float = 30.0) -> bool:
    try:
        wait_for(lambda: peer_id in _connected(node), timeout, "not connected")
    except AssertionError:
        return False
    return True


@pytest.mark.timeout(240)
def test_join_checks_the_address_and_stores_only_what_worked(tmp_path: Path) -> None:
    a, b, c = start_all([InProcessNode(tmp_path / name) for name in "abc"])
    try:
        _join_then_forget(tmp_path, a, b, c)
    finally:  # whatever failed: no node left behind
        for node in (a, b, c):
            node.terminate()


def _join_then_forget(tmp_path: Path, a: InProcessNode, b: InProcessNode, c: InProcessNode) -> None:
    try:
        a_port = a.listen_addrs[0].split("/")[4]
        c_port = c.listen_addrs[0].split("/")[4]
        joined = b.cli("join", a.listen_addrs[0])
        assert joined.returncode == 0, joined.stderr
        assert a.peer_id in _connected(b)
        # Already connected to A, yet each address is dialled: a dead port fails ...
        dead = b.cli("join", f"/ip4/127.0.0.1/tcp/9/p2p/{a.peer_id}")
        assert_one_error(dead, 1, "tcp/9")
        # ... and so does another node's port claiming to be A.
        wrong = b.cli("join", f"/ip4/127.0.0.1/tcp/{c_port}/p2p/{a.peer_id}")
        assert_one_error(wrong, 1, "HTTP 502")
        # /dns4 resolves (a loopback name only, in tests).
        dns = b.cli("join", f"/dns4/localhost/tcp/{a_port}/p2p/{a.peer_id}")
        assert dns.returncode == 0, dns.stderr
        peers = json.loads(b.cli("peers", "--json").stdout)
        assert a.peer_id in peers["known"]
    finally:
        b.terminate()
    # After a restart B redials the last address that worked (the /dns4 one), not a bad one.
    b2 = InProcessNode(tmp_path / "b").start()
    try:
        assert _wait_connected(b2, a.peer_id), b2.log_tail()
        forget = b2.cli("peers", "forget", a.peer_id)
        assert forget.returncode == 0, forget.stderr
        assert a.peer_id not in json.loads(b2.cli("peers", "--json").stdout)["known"]
        again = b2.cli("peers", "forget", a.peer_id)
        assert_one_error(again, 1, "not a known peer")
        # A may still connect to B (it joins B here, as its own redial did in a loaded CI
        # run): its peer exchange offers its own record, which B refuses. B used to learn A
        # back from it, save it, and dial A after its next start.
        a.post("/v1/peers", {"multiaddr": b2.listen_addrs[0]})
        wait_for(lambda: metric(b2, 'px_records_total{outcome="forgotten"}') >= 1, 30,
                 "B did not refuse the forgotten peer's record")
    finally:
        b2.terminate()
    # Forgotten for good: after another restart B neither knows nor dials A.
    b3 = InProcessNode(tmp_path / "b").start()
    try:
        time.sleep(2.0)
        peers = json.loads(b3.cli("peers", "--json").stdout)
        assert a.peer_id not in peers["known"]
        assert a.peer_id not in _connected(b3)
        # The forgotten list was saved: A's record is still refused.
        a.post("/v1/peers", {"multiaddr": b3.listen_addrs[0]})
        wait_for(lambda: metric(b3, 'px_records_total{outcome="forgotten"}') >= 1, 30,
                 "B forgot that it forgot A")
    finally:
        b3.terminate()
