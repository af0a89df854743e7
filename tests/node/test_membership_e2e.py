"""Finding 1 of issue 27 and scenario 4's fake records (real nodes on loopback, run in the test's
process: the test is about membership, not processes): joining one member reaches the whole
group, a flood of fake signed peer records cannot take over a member's address book, and losing
the first member does not partition the rest."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

from node.clock import SystemClock
from node.p2p import FramedStream, P2PConfig, P2PHost
from node.p2p.records import LocalRecord
from node.p2p.run import open_host
from node.replication.px import PX_PROTOCOL
from sync.membership import encode_records
from tests.harness.cluster import (
    channel_log,
    fast_inproc,
    metric,
    publish_many,
    wait_for,
)
from tests.harness.procs import NodeApi, start_all

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
PER_SOURCE = 16
BOOK_SIZE = 48


def _connected(node: NodeApi) -> set[str]:
    return {p["peer_id"] for p in node.get("/v1/peers")["connected"]}


def _book(node: NodeApi) -> dict[str, dict[str, object]]:
    return {e["peer_id"]: e for e in node.get("/v1/peers/book")["entries"]}


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


async def _serve_fakes(stream: FramedStream) -> None:
    await stream.receive()
    await stream.send(encode_records(fake_records(16, int(trio.current_time() * 1000) % 200)))


async def _hostile_host(task_status: trio.TaskStatus[P2PHost]) -> None:
    config = P2PConfig(listen_addrs=("/ip4/127.0.0.1/tcp/0",))
    async with open_host(Ed25519PrivateKey.generate(), config, clock=SystemClock()) as host:
        host.set_stream_handler(PX_PROTOCOL, _serve_fakes)
        task_status.started(host)
        await trio.sleep_forever()


def _refused(node: NodeApi) -> float:
    return sum(metric(node, f'px_records_total{{outcome="{o}"}}')
               for o in ("source_full", "bucket_full", "book_full"))


async def _flood(target: NodeApi, attackers: int) -> None:
    """Hostile peers the user joined answer every peer exchange with 16 fresh fake records."""
    async with trio.open_nursery() as nursery:
        for _ in range(attackers):
            host = await nursery.start(_hostile_host)
            joined = await trio.to_thread.run_sync(target.cli, "join", host.listen_addrs[0])
            assert joined.returncode == 0, joined.stderr
        # Asked again and again (px_interval_s = 0.5): far more than the book takes from them.
        await trio.to_thread.run_sync(wait_for, lambda: _refused(target) >= 2 * PER_SOURCE, 60,
                                      "the node did not take the flood")
        nursery.cancel_scope.cancel()


def _check_what_a_user_sees(node: NodeApi, other: NodeApi) -> None:
    """Path, round trip and the last Recon session per peer; the address book's size."""
    def recon_done() -> bool:  # polled through the API (a CLI process per poll costs seconds)
        listing = node.get("/v1/peers")
        peer = next(p for p in listing["connected"] if p["peer_id"] == other.peer_id)
        return peer["last_recon"] is not None and peer["rtt_ms"] is not None

    wait_for(recon_done, 40, "no Recon session or round trip shown")
    listing = json.loads(node.cli("peers", "--json").stdout)
    peer = next(p for p in listing["connected"] if p["peer_id"] == other.peer_id)
    assert peer["path"] == "direct" and peer["last_seen"] > 0
    assert peer["last_recon"]["outcome"] == "ok", peer
    text = node.cli("peers").stdout
    assert f"{other.peer_id}" in text and "direct" in text and "RTT" in text, text
    assert "address book:" in text
    assert node.status()["address_book"] >= 2
    watch = node.cli("status", "--watch", "--count", "1", "--interval", "0.2")
    assert watch.returncode == 0 and "book=" in watch.stdout, watch
    metrics = node.get("/metrics")
    assert f'peer_last_recon_timestamp_seconds{{outcome="ok",peer="{other.peer_id[-12:]}"}}' \
        in metrics, metrics[-2000:]
    for family in ("peer_rtt_seconds", "peer_last_seen_timestamp_seconds",
                   "peer_last_recon_events_fetched", "peer_last_recon_events_served"):
        assert f'syncnode_{family}{{' in metrics, family
    assert metric(node, "address_book_peers") >= 2
    assert metric(node, "px_exchanges_total") > 0


def test_joined_to_the_first_the_group_meshes_resists_fake_records_and_survives_its_loss(
        tmp_path: Path) -> None:
    flood_env = {"SYNCNODE_MEMBERSHIP_PX_INTERVAL_S": "0.5",
                 "SYNCNODE_MEMBERSHIP_ADDRESS_BOOK_PER_SOURCE": str(PER_SOURCE),
                 "SYNCNODE_MEMBERSHIP_ADDRESS_BOOK_SIZE": str(BOOK_SIZE)}
    # n5, the newcomer of the end, starts with the others and joins nobody until then.
    every = start_all([fast_inproc(tmp_path, name, env=flood_env if name == "n2" else None)
                       for name in ("n1", "n2", "n3", "n4", "n5")])
    nodes, late = every[:4], every[4]
    try:
        for node in nodes[1:]:  # ``syncnode join``'s API call (the CLI: tests/node/test_join.py)
            node.post("/v1/peers", {"multiaddr": nodes[0].listen_addrs[0]})
        started = time.monotonic()
        wait_for(lambda: all(_connected(n) >= {m.peer_id for m in nodes if m is not n}
                             for n in nodes), 30, "the four nodes did not all connect")
        meshed_s = time.monotonic() - started
        for node in nodes[1:]:  # each knows the others from peer exchange, not only n1
            assert node.get("/v1/peers")["address_book"] >= 3

        # Scenario 4: n2 is flooded with fake records by two hostile peers.
        n2 = nodes[1]
        trio.run(_flood, n2, 2)
        entries = _book(n2)
        for node in nodes[2:]:  # the honest peers n2 reached stay, whatever the flood
            assert node.peer_id in entries and entries[node.peer_id]["tried"], entries.keys()
        per_source: dict[object, int] = {}
        for entry in entries.values():
            per_source[entry["source"]] = per_source.get(entry["source"], 0) + 1
        assert all(n <= PER_SOURCE for s, n in per_source.items() if s is not None), per_source
        assert len(entries) <= BOOK_SIZE
        assert metric(n2, 'px_records_total{outcome="added"}') >= 2 * PER_SOURCE

        # Finding 1: the first member stops; the rest keep syncing.
        nodes[0].kill()
        event = publish_many(n2, "general", ["after n1 left"])[0]
        wait_for(lambda: all(event in {m for _, m, _ in channel_log(n, "general")}
                             for n in nodes[2:]), 60, "n3 and n4 did not get n2's event")
        # A newcomer joining n4 (not n2) still reaches n2 through peer exchange.
        late.post("/v1/peers", {"multiaddr": nodes[3].listen_addrs[0]})
        wait_for(lambda: n2.peer_id in _connected(late), 30, "n5 did not reach n2")
        _check_what_a_user_sees(nodes[2], nodes[3])
        # The address book outlives a restart: n4 only ever joined n1 (gone), yet it finds
        # n2 and n3 again from its saved book.
        n4 = nodes[3]
        assert n4.terminate() == 0
        n4.start()
        assert {n2.peer_id, nodes[2].peer_id} <= set(_book(n4))
        wait_for(lambda: _connected(n4) >= {n2.peer_id, nodes[2].peer_id}, 30,
                 "the restarted n4 did not reconnect from its address book")
        assert metric(n4, 'membership_dials_total{kind="dial",result="ok"}') >= 2
        print(f"meshed in {meshed_s:.1f} s")
    finally:
        for node in every:
            node.kill()
