"""Block streams in one process: producers' signed SDS events in the database, the blocks
application driven by the real ``AppRunner``, on SQLite (and PostgreSQL with SYNCNODE_TEST_PG)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from node.apps.blocks_app import BlocksApplication, router_of
from node.apps.blocks_plugin import BlocksPlugin
from node.apps.runner import AppRunner
from node.clock import SystemClock
from node.config.apps import BlocksSection
from node.config.fields import ConfigError
from node.config.settings import Config, load_config
from node.store.events import EventStore
from node.store.signal import CommitSignal
from node.telemetry.metrics import Metrics
from storage import EventRecord, append_events, get_state, make_engine, put_state, upgrade
from storage.blocks import block_at, block_by_hash, get_head, read_changes
from sync.cardinal import (
    ZERO_HASH,
    BlockPayload,
    Producer,
    RoutedMessage,
    encode_envelope,
    make_payload,
    make_sub_batch,
    payload_to_json,
)
from sync.identity import peer_id_of
from sync.sds import Delivered, SdsChannel
from sync.stored_event import record_of_delivered
from tests.storage.conftest import BACKENDS, fresh_url


def producer_key(seed: int) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(bytes([seed])).digest())


# Producers 1 and 2 are declared; a ProducerNode(3) is any other member.
SECTION = BlocksSection(
    enabled=True, channel="blocks", routes=("acct/=blocks-acct", "state/=blocks-state"),
    reorg_threshold=8, subbatch_chunk=2,
    producers=(peer_id_of(producer_key(1)), peer_id_of(producer_key(2))),
)


def h(name: str) -> bytes:
    """A 32-byte hash whose order follows ``name`` (tie-breaks are easy to predict)."""
    return name.encode().ljust(32, b"\x00")


def block(name: str, number: int, parent: BlockPayload | None, weight: int | None = None,
          keys: int = 3, variant: bytes = b"") -> BlockPayload:
    updates = {f"acct/{name}/{i}": bytes([i]) + variant for i in range(keys)}
    updates[f"meta/{name}"] = name.encode()  # no route: travels inline in the Batch
    sub = make_sub_batch("state/", hashlib.sha256(name.encode()).digest(),
                         {f"state/{name}/{i}": b"s" for i in range(3)}, [f"state/old/{name}"])
    return make_payload(h(name), number, parent.hash if parent else ZERO_HASH, weight,
                        updates, [f"acct/gone/{name}"], [sub])


class ProducerNode:
    """A peer that produces blocks: each message becomes a signed event on its channel."""

    def __init__(self, seed: int, section: BlocksSection = SECTION) -> None:
        self.key = producer_key(seed)
        self.peer = peer_id_of(self.key)
        self.section = section
        self.producer = Producer(router_of(section), subbatch_chunk=section.subbatch_chunk,
                                 layout=section.producer_layout)
        self.sds: dict[str, SdsChannel] = {}
        self.now = 1_700_000_000.0

    def records(self, messages: Sequence[RoutedMessage], reorg: str | None = None,
                raw: Sequence[tuple[str, bytes]] = ()) -> list[EventRecord]:
        items = [(self.section.channel if reorg else m.channel,
                  encode_envelope(m.key, m.value, reorg)) for m in messages]
        out = []
        for name, content in [*items, *raw]:
            ch = self.sds.get(name)
            if ch is None:
                ch = self.sds[name] = SdsChannel(name, self.peer, self.key,
                                                 rng=random.Random(0), now=self.now)
            self.now += 0.001
            ch.send(content, self.now)
            out += [record_of_delivered(1, name, ev) for ev in ch.events()
                    if isinstance(ev, Delivered)]
        return out

    def publish(self, *payloads: BlockPayload) -> list[EventRecord]:
        return self.records([m for p in payloads for m in self.producer.messages_for(p)])

    def publish_reorg(self, ancestor: BlockPayload, *payloads: BlockPayload) -> list[EventRecord]:
        messages = self.producer.reorg_messages(ancestor.hash, ancestor.number, payloads)
        return self.records(messages, reorg=messages[0].channel)


class Node:
    """The consuming side: the real AppRunner and BlocksApplication on a database."""

    def __init__(self, engine: Engine, section: BlocksSection = SECTION) -> None:
        self.engine = engine
        self.section = section
        self.start()

    def start(self) -> None:
        """A fresh application and runner, as after a process restart."""
        self.metrics = Metrics()
        self.app = BlocksApplication(self.section, self.metrics, clock=SystemClock())
        self.runner = AppRunner(self.app, EventStore(self.engine), self.metrics, CommitSignal(),
                                clock=SystemClock())
        with self.engine.connect() as conn:
            raw = get_state(conn, "app/blocks/cursor")
        self.runner.cursor = int(raw.decode()) if raw else 0

    def store(self, records: Sequence[EventRecord]) -> None:
        with self.engine.begin() as conn:
            append_events(conn, records, 1_700_000_000_000)

    async def drain(self) -> None:
        while await self.runner.step():
            pass
        assert self.metrics.value("app_errors_total", app="blocks") == 0

    async def deliver(self, records: Sequence[EventRecord], rng: random.Random | None = None,
                      batches: int = 1) -> None:
        """Store ``records`` (shuffled with ``rng``) in ``batches`` commits, applying each."""
        records = list(records)
        if rng is not None:
            rng.shuffle(records)
        cuts = sorted(rng.sample(range(1, len(records)), batches - 1)) if rng and batches > 1 \
            else []
        for start, end in zip([0, *cuts], [*cuts, len(records)], strict=True):
            self.store(records[start:end])
            await self.drain()

    # -- reading back ------------------------------------------------------------------------

    def changes(self) -> list[str]:
        with self.engine.connect() as conn:
            rows = read_changes(conn, "blocks", 0, 100_000)
        sign = {"applied": "+", "reverted": "-"}
        return [sign[c.kind] + c.hash.rstrip(b"\x00").decode() for c in rows]

    def head(self) -> str:
        with self.engine.connect() as conn:
            head = get_head(conn, "blocks")
        assert head is not None
        return head.hash.rstrip(b"\x00").decode()

    def stored(self, payload: BlockPayload) -> tuple[bool, dict[str, object]] | None:
        with self.engine.connect() as conn:
            row = block_by_hash(conn, "blocks", payload.hash)
        return None if row is None else (row.canonical, json.loads(row.payload))

    def canonical_at(self, number: int) -> str | None:
        with self.engine.connect() as conn:
            row = block_at(conn, "blocks", number)
        return None if row is None else row.hash.rstrip(b"\x00").decode()


def replay(changes: list[str]) -> list[str]:
    chain: list[str] = []
    for change in changes:
        if change[0] == "+":
            chain.append(change[1:])
        else:
            assert chain.pop() == change[1:], "reverts must come newest first"
    return chain


@pytest.fixture(params=BACKENDS)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    eng = make_engine(fresh_url(request.param, tmp_path))
    upgrade(eng)
    yield eng
    eng.dispose()


A = block("A", 0, None)
B = block("B", 1, A)
C = block("C", 2, B)
D = block("D", 3, C)
E = block("E", 2, B)  # a side branch, lighter than D
CHAIN = [A, B, C, D]


# -- config and plugin -------------------------------------------------------------------------


def test_plugin_is_off_by_default_and_declares_the_routed_channels() -> None:
    plugin = BlocksPlugin()
    assert plugin.channels(Config()) == []
    assert BlocksApplication(BlocksSection(), clock=SystemClock()).channels == ()
    with pytest.raises(ConfigError, match=r"blocks\.producers"):
        load_config(env={"SYNCNODE_BLOCKS_ENABLED": "true"})
    config = load_config(env={"SYNCNODE_BLOCKS_ENABLED": "true",
                              "SYNCNODE_BLOCKS_PRODUCERS": SECTION.producers[0],
                              "SYNCNODE_BLOCKS_ROUTES": "acct/=blocks-acct, state/=blocks-state",
                              "SYNCNODE_BLOCKS_REORG_THRESHOLD": "4"})
    assert config.blocks.reorg_threshold == 4
    assert plugin.channels(config) == ["blocks", "blocks-acct", "blocks-state"]


@pytest.mark.parametrize(("routes", "fragment"), [
    ("acct/", "REGEX=CHANNEL"), ("=x", "REGEX=CHANNEL"), ("(=x", "invalid regex"),
])
def test_bad_routes_are_config_errors(routes: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=r"blocks\.routes") as info:
        load_config(env={"SYNCNODE_BLOCKS_ROUTES": routes})
    assert fragment in str(info.value)


# -- delivery -----------------------------------------------------------------------------------


@pytest.mark.trio
@pytest.mark.parametrize("seed", range(3))
async def test_two_producers_shuffled_with_duplicates(engine: Engine, seed: int) -> None:
    rng = random.Random(seed)
    records = ProducerNode(1).publish(*CHAIN, E) + ProducerNode(2).publish(*CHAIN, E)
    node = Node(engine)
    await node.deliver(records, rng, batches=5)
    assert node.head() == "D"
    assert replay(node.changes()) == ["A", "B", "C", "D"]
    for payload in CHAIN:
        assert node.stored(payload) == (True, payload_to_json(payload))
    side = node.stored(E)
    assert side is None or side == (False, payload_to_json(E))
    assert [node.canonical_at(n) for n in range(5)] == ["A", "B", "C", "D", None]
    applied = node.metrics.value("blocks_applied_total")
    assert applied - node.metrics.value("blocks_reverted_total") == 4
    assert node.metrics.value("blocks_failed_total", reason="before") == 0


@pytest.mark.trio
@pytest.mark.parametrize("seed", range(2))
async def test_a_go_layout_producer_mixed_with_ours(engine: Engine, seed: int) -> None:
    """``producer_layout = "go"`` chunks sub batches as the Go reference does; a node hearing
    it and a ``syncnode`` producer at once assembles every block, whatever arrives first."""
    go = ProducerNode(1, dataclasses.replace(SECTION, producer_layout="go"))
    records = go.publish(*CHAIN) + ProducerNode(2).publish(*CHAIN)
    node = Node(engine)
    await node.deliver(records, random.Random(seed), batches=3)
    assert node.head() == "D"
    assert replay(node.changes()) == ["A", "B", "C", "D"]
    for payload in CHAIN:
        assert node.stored(payload) == (True, payload_to_json(payload))
    assert node.metrics.value("blocks_failed_total", reason="before") == 0
    assert node.metrics.value("blocks_failed_total", reason="after") == 0


@pytest.mark.trio
async def test_reorg_within_threshold_reverts_and_reapplies(engine: Engine) -> None:
    producer, node = ProducerNode(1), Node(engine)
    await node.deliver(producer.publish(A, B, C))
    heavier = block("X", 1, A, weight=5)
    await node.deliver(producer.publish(heavier))
    assert node.changes() == ["+A", "+B", "+C", "-C", "-B", "+X"]
    assert node.head() == "X"
    assert node.canonical_at(1) == "X" and node.canonical_at(2) is None
    assert node.stored(B) == (False, payload_to_json(B))


@pytest.mark.trio
async def test_restart_resumes_a_partly_reassembled_block(engine: Engine) -> None:
    producer, node = ProducerNode(1), Node(engine)
    await node.deliver(producer.publish(A, B))
    rest = producer.publish(C)
    # The Batch (first) and half of C's messages before the restart, the rest after it.
    await node.deliver(rest[: len(rest) // 2])
    assert node.head() == "B"
    node.start()
    await node.deliver(rest[len(rest) // 2 :])
    assert node.changes() == ["+A", "+B", "+C"]
    assert node.stored(C) == (True, payload_to_json(C))
    # And once more with nothing pending: nothing is applied twice.
    node.start()
    await node.deliver(producer.publish(D))
    assert node.changes() == ["+A", "+B", "+C", "+D"]


@pytest.mark.trio
async def test_startup_reorg_after_a_restart(engine: Engine) -> None:
    """The reference's "Startup Reorg": after a restart, a second producer replays the recent
    history and a heavier competing branch; the node moves to it in one reorg."""
    first, second = [A], [A]
    for n in range(1, 8):
        first.append(block(f"X{n}", n, first[-1]))
        second.append(block(f"Y{n}", n, second[-1]))
    node = Node(engine)
    await node.deliver(ProducerNode(1).publish(*first[:7]))
    assert node.head() == "X6"
    node.start()
    await node.deliver(ProducerNode(2).publish(*first[:7], *second), random.Random(4), batches=3)
    assert node.head() == "Y7"
    assert node.changes() == [
        "+A", *(f"+X{n}" for n in range(1, 7)),
        *(f"-X{n}" for n in range(6, 0, -1)), *(f"+Y{n}" for n in range(1, 8)),
    ]
    assert node.metrics.value("blocks_failed_total", reason="before") == 0


@pytest.mark.trio
async def test_a_corrupt_state_restarts_from_the_stored_head(engine: Engine) -> None:
    producer, node = ProducerNode(1), Node(engine)
    await node.deliver(producer.publish(A, B, C))
    with engine.begin() as conn:
        put_state(conn, "app/blocks/consumer", b"{not json", 0)
    node.start()
    await node.deliver(producer.publish(D))
    assert node.changes() == ["+A", "+B", "+C", "+D"]
    assert node.head() == "D"


@pytest.mark.trio
async def test_failed_transaction_reloads_the_consumer(engine: Engine) -> None:
    producer, node = ProducerNode(1), Node(engine)
    node.store(producer.publish(A, B))
    with pytest.raises(RuntimeError), engine.begin() as conn:
        from storage import read_channels_after

        node.app.apply(conn, read_channels_after(conn, node.app.channels, 0, 2000))
        raise RuntimeError("the commit fails after apply")
    # The in-memory consumer saw A and B, the database did not: it must start over.
    await node.drain()
    assert node.changes() == ["+A", "+B"]
    assert node.head() == "B"


@pytest.mark.trio
async def test_conflicting_batch_first_fails_cleanly(engine: Engine) -> None:
    honest, faulty, node = ProducerNode(1), ProducerNode(2), Node(engine)
    await node.deliver(honest.publish(A))
    other = block("B", 1, A, keys=5, variant=b"!")  # same hash, other content
    batch = faulty.producer.messages_for(other)[0]
    await node.deliver(faulty.records([batch]) + honest.publish(B))
    assert node.metrics.value("blocks_failed_total", reason="before") == 1
    assert node.stored(B) is None
    assert node.changes() == ["+A"]
    # The stream goes on: an unrelated heavier branch still applies.
    await node.deliver(honest.publish(block("Y", 1, A, weight=3)))
    assert node.head() == "Y"


@pytest.mark.trio
async def test_malformed_content_is_counted_not_raised(engine: Engine) -> None:
    producer, node = ProducerNode(1), Node(engine)
    junk = producer.records([], raw=[("blocks", b"\x09junk"), ("blocks", b"\x00\x02\x07\x00xx"),
                                     ("blocks-acct", b"\x00\x01")])
    await node.deliver(junk + producer.publish(A, B))
    assert node.changes() == ["+A", "+B"]
    total = node.metrics.total("blocks_rejected_total")
    assert total == 3


@pytest.mark.trio
async def test_deep_reorg_from_two_producers_is_followed_once(engine: Engine) -> None:
    section = BlocksSection(enabled=True, channel="blocks", routes=SECTION.routes,
                            reorg_threshold=1, subbatch_chunk=2, producers=SECTION.producers)
    p1, p2, node = ProducerNode(1, section), ProducerNode(2, section), Node(engine, section)
    chain = [A, B, C, D, block("F", 4, D), ]
    await node.deliver(p1.publish(*chain) + p2.publish(*chain))
    assert node.head() == "F"
    x2 = block("X", 2, B)
    x3 = block("Z", 3, x2)
    await node.deliver(p1.publish_reorg(B, x2, x3) + p2.publish_reorg(B, x2, x3))
    assert node.changes() == ["+A", "+B", "+C", "+D", "+F", "-F", "-D", "-C", "+X", "+Z"]
    assert node.head() == "Z"
    assert node.canonical_at(2) == "X" and node.canonical_at(4) is None
    assert node.metrics.value("blocks_reorgs_total", reason="ReorgStarted") == 1
    # F, D and C were undone and X, Z applied on top of A, B, C, D, F.
    assert node.metrics.value("blocks_reverted_total") == 3
    assert node.metrics.value("blocks_applied_total") == 7


# -- convergence --------------------------------------------------------------------------------

TREE = [A, B, C, D, E, block("G", 3, E, weight=7), block("H", 1, A, weight=2)]


@settings(deadline=None, max_examples=12)
@given(st.randoms(use_true_random=False), st.integers(1, 6), st.floats(0.0, 0.5))
def test_any_delivery_order_with_duplicates_ends_at_the_same_head(
    rng: random.Random, batches: int, dup_share: float
) -> None:
    records = ProducerNode(1).publish(*TREE)
    copies = ProducerNode(2).publish(*TREE)
    records += rng.sample(copies, int(len(copies) * dup_share))
    with tempfile.TemporaryDirectory() as tmp:
        eng = make_engine(f"sqlite:///{tmp}/node.db")
        upgrade(eng)
        try:
            node = Node(eng)
            trio.run(node.deliver, records, rng, min(batches, len(records)))
            assert node.head() == "G"
            assert replay(node.changes()) == ["A", "B", "E", "G"]
            for payload in (A, B, E, TREE[5]):
                assert node.stored(payload) == (True, payload_to_json(payload))
        finally:
            eng.dispose()


# -- API ----------------------------------------------------------------------------------------


@pytest.mark.trio
async def test_a_disabled_app_reads_nothing(engine: Engine) -> None:
    node = Node(engine, BlocksSection())
    node.store(ProducerNode(1).publish(A))
    assert not await node.runner.step()


def api_client(engine: Engine, section: BlocksSection,
               producer: bool = True) -> httpx.AsyncClient:
    from node.api.app import create_app
    from node.runtime import NodeRuntime

    key = Ed25519PrivateKey.generate()
    if section.enabled and producer:
        section = dataclasses.replace(section, producers=(*section.producers, peer_id_of(key)))
    runtime = NodeRuntime(config=dataclasses.replace(Config(), blocks=section),
                          key=key, store=EventStore(engine), clock=SystemClock(),
                          commits=CommitSignal())
    bundle = BlocksPlugin().build(runtime)
    transport = httpx.ASGITransport(app=create_app(runtime, bundle.routes))
    return httpx.AsyncClient(transport=transport, base_url="http://node")


@pytest.mark.trio
async def test_read_routes_answer_from_the_tables(engine: Engine) -> None:
    async with api_client(engine, SECTION) as client:
        answer = await client.get("/v1/blocks/head")
        assert (answer.status_code, answer.json()) == (404, {"error": "no block applied yet"})
        await Node(engine).deliver(ProducerNode(1).publish(A, B, C))
        head = (await client.get("/v1/blocks/head")).json()
        assert (head["hash"], head["number"], head["weight"]) == ("0x" + C.hash.hex(), 2, "2")
        by_number = (await client.get("/v1/blocks/1")).json()
        assert by_number["payload"] == payload_to_json(B) and by_number["canonical"] is True
        assert (await client.get(f"/v1/blocks/0x{C.hash.hex()}")).json()["number"] == 2
        assert (await client.get("/v1/blocks/9")).status_code == 404
        assert (await client.get("/v1/blocks/0x1234")).status_code == 400
        bodies: list[object] = [{}, {"blocks": []}, {"blocks": [{"hash": "0x00"}]}, []]
        for body in bodies:
            answer = await client.post("/v1/blocks", json=body)
            assert answer.status_code == 400, body
        answer = await client.post("/v1/blocks", json={"blocks": [{}]})
        assert "blocks[0]: " in answer.json()["error"]


@pytest.mark.trio
async def test_routes_of_a_disabled_node_say_so(engine: Engine) -> None:
    async with api_client(engine, BlocksSection()) as client:
        for method, path in (("GET", "/v1/blocks/head"), ("GET", "/v1/blocks/1"),
                             ("GET", "/v1/blocks/follow"), ("POST", "/v1/blocks")):
            answer = await client.request(method, path)
            assert answer.status_code == 409  # as the database's routes when it is off
            assert "blocks.enabled = true" in answer.json()["error"]


@pytest.mark.trio
async def test_a_reorg_from_a_non_producer_moves_nobody(engine: Engine) -> None:
    """Attack 7: a member that is no producer sends a deep Reorg (and blocks of its own)."""
    honest, intruder, node = ProducerNode(1), ProducerNode(3), Node(engine)
    await node.deliver(honest.publish(A, B, C, D))
    assert node.head() == "D"
    x2 = block("X", 2, B, weight=50)
    await node.deliver(intruder.publish_reorg(B, x2) + intruder.publish(block("Q", 4, D)))
    assert node.head() == "D"
    assert node.changes() == ["+A", "+B", "+C", "+D"]
    assert node.metrics.value("blocks_rejected_total", reason="not a producer") > 0
    # The honest chain goes on.
    await node.deliver(honest.publish(block("F", 4, D)))
    assert node.head() == "F"


@pytest.mark.trio
async def test_a_node_that_is_no_producer_cannot_publish_blocks(engine: Engine) -> None:
    async with api_client(engine, SECTION, producer=False) as client:
        for path in ("/v1/blocks", "/v1/blocks/reorg"):
            answer = await client.post(path, json={"blocks": [payload_to_json(A)]})
            assert answer.status_code == 403
            assert "blocks.producers" in answer.json()["error"]
