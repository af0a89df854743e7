"""Scenario 4 of issue 27 (hostile, on loopback): a flood of fake signed peer records cannot take
over the address book, and 300 idle identities cannot lock honest peers out."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

from node.p2p import FramedStream, P2PConfig
from node.p2p.records import LocalRecord
from node.p2p.run import open_host
from node.replication.px import PX_PROTOCOL
from sync.membership import encode_records
from tests.node.cluster import metric, start_node, wait_for
from tests.node.hostile_conns import hold_idle
from tests.node.procs import NodeProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
PER_SOURCE = 16


def fake_records(count: int, seed: int) -> list[bytes]:
    """Validly signed records of fresh identities at addresses nobody listens on: half in the
    honest peers' own network (127.0/16), half all over 198.18.0.0/15."""
    out = []
    for i in range(count):
        key = create_new_key_pair()
        host = f"127.0.{seed % 250}.{i % 250 + 2}" if i % 2 else f"198.{18 + i % 2}.{seed}.{i}"
        out.append(LocalRecord(ID.from_pubkey(key.public_key), key.private_key,
                               [f"/ip4/{host}/tcp/{20000 + i}"]).envelope)
    return out


def book(node: NodeProcess) -> dict[str, dict[str, object]]:
    return {e["peer_id"]: e for e in node.get("/v1/peers/book")["entries"]}


async def _flood(target: NodeProcess, honest: list[NodeProcess], attackers: int) -> None:
    async def serve_fakes(stream: FramedStream) -> None:
        await stream.receive()
        seed = int(trio.current_time() * 1000) % 200
        await stream.send(encode_records(fake_records(16, seed)))

    async with trio.open_nursery() as nursery:
        hosts = []
        for _ in range(attackers):
            host = await nursery.start(_hostile_host, serve_fakes)
            hosts.append(host)
        for host in hosts:  # the user joins a hostile peer: the node asks it for records
            joined = await trio.to_thread.run_sync(target.cli, "join", host.listen_addrs[0])
            assert joined.returncode == 0, joined.stderr
        # Each hostile peer is asked again and again (px_interval_s = 0.5): many more records
        # than the book could hold from them.
        await trio.to_thread.run_sync(wait_for, lambda: metric(
            target, "px_records_total") >= attackers * PER_SOURCE * 3, 60,
            "the node did not take the flood")
        nursery.cancel_scope.cancel()


async def _hostile_host(handler: object, task_status: trio.TaskStatus[object]) -> None:
    config = P2PConfig(listen_addrs=("/ip4/127.0.0.1/tcp/0",))
    async with open_host(Ed25519PrivateKey.generate(), config) as host:
        host.set_stream_handler(PX_PROTOCOL, handler)  # type: ignore[arg-type]
        task_status.started(host)
        await trio.sleep_forever()


def test_a_flood_of_fake_peer_records_cannot_take_over_the_address_book(tmp_path: Path) -> None:
    env = {"SYNCNODE_MEMBERSHIP_PX_INTERVAL_S": "0.5",
           "SYNCNODE_MEMBERSHIP_ADDRESS_BOOK_PER_SOURCE": str(PER_SOURCE),
           "SYNCNODE_MEMBERSHIP_ADDRESS_BOOK_SIZE": "64"}
    target = start_node(tmp_path, "target", env=env)
    honest = [start_node(tmp_path, f"h{i}") for i in range(2)]
    try:
        for node in honest:
            assert target.cli("join", node.listen_addrs[0]).returncode == 0
        trio.run(_flood, target, honest, 4)
        entries = book(target)
        for node in honest:  # the peers we reached stay, tried, whatever the flood
            assert node.peer_id in entries and entries[node.peer_id]["tried"], entries.keys()
        per_source: dict[object, int] = {}
        for entry in entries.values():
            per_source[entry["source"]] = per_source.get(entry["source"], 0) + 1
        assert all(n <= PER_SOURCE for s, n in per_source.items() if s is not None), per_source
        assert len(entries) <= 64
        refused = sum(metric(target, f'px_records_total{{outcome="{o}"}}')
                      for o in ("source_full", "bucket_full", "book_full"))
        assert refused > 0
        # A newcomer joining any honest member still reaches the target.
        late = start_node(tmp_path, "late")
        honest.append(late)
        assert late.cli("join", honest[0].listen_addrs[0]).returncode == 0
        wait_for(lambda: target.peer_id in {p["peer_id"] for p in late.get("/v1/peers")[
            "connected"]}, 30, "the newcomer did not reach the target through peer exchange")
    finally:
        for node in [target, *honest]:
            node.kill()


async def _idle_then_join(target: NodeProcess, honest: NodeProcess, count: int) -> None:
    async with hold_idle(target.listen_addrs[0], count) as alive:
        held = sum(alive)
        joined = await trio.to_thread.run_sync(honest.cli, "join", target.listen_addrs[0])
        assert joined.returncode == 0, (joined.stderr, target.log_tail())
        # The node closes every connection that never speaks a protocol.
        deadline = time.monotonic() + 30
        while sum(alive) and time.monotonic() < deadline:
            await trio.sleep(0.5)
        assert sum(alive) == 0, f"{sum(alive)} of {held} idle connections still open"


def test_300_idle_identities_do_not_lock_honest_peers_out(tmp_path: Path) -> None:
    target = NodeProcess(tmp_path / "target",
                         env={"SYNCNODE_MEMBERSHIP_IDLE_TIMEOUT_S": "5"}).start()
    honest = NodeProcess(tmp_path / "honest").start()
    try:
        trio.run(_idle_then_join, target, honest, 300)
        assert metric(target, "membership_idle_closed_total") + \
            metric(target, "p2p_inbound_evicted_total") > 0
        assert honest.peer_id in {p["peer_id"] for p in target.get("/v1/peers")["connected"]}
    finally:
        target.kill()
        honest.kill()
