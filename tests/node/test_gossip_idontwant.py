"""GossipSub 1.2's IDONTWANT sent on receipt, before validation (compat entry G6,
``[p2p] gossip_idontwant``), on real libp2p hosts.

Three hosts in a line, A - B - C, all with the setting on: B is the relay under test. A's
message reaches C only through B, so what C reads from B is deterministic: the IDONTWANT
for a message of at least 1 KiB reaches C while B still validates it, and with synchronous
validation the forwarded message and its IDONTWANT travel in one RPC. RPCs are observed where
C's pubsub reads them (the module's reader, looked up at call time, wrapped and called
through); nothing is timed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import libp2p.pubsub.pubsub as pubsub_module
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V12, GossipSub
from libp2p.pubsub.pb import rpc_pb2

from node.api import register_p2p_metrics
from node.clock import SystemClock
from node.config.settings import load_config
from node.daemon import p2p_config
from node.p2p import P2PConfig, P2PHost, compat
from node.p2p.compat.idontwant import THRESHOLD_BYTES
from node.p2p.run import open_host
from node.telemetry.metrics import Metrics
from tests.harness.cluster import until

TOPIC = "idontwant"
BIG = THRESHOLD_BYTES + 676  # 1,700 bytes, as the benchmarks send


def _router(host: P2PHost) -> GossipSub:
    router: GossipSub = host._gossip._router
    return router


def _pubsub(host: P2PHost) -> Any:
    return host._gossip._pubsub


class _Reads:
    """Every RPC the pubsub readers read from ``sender`` (parsed again, after the reader).
    Installed before the hosts connect: a reader looks the function up when it starts."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rpcs: list[rpc_pb2.RPC] = []
        self.sender: ID | None = None
        compat.apply()  # B1 sets the reader once per process: wrap that one
        read = pubsub_module.read_varint_prefixed_bytes_limited

        async def reading(stream: Any, *args: Any, **kwargs: Any) -> bytes:
            data: bytes = await read(stream, *args, **kwargs)
            if self.sender is not None and stream.muxed_conn.peer_id == self.sender:
                rpc = rpc_pb2.RPC()
                rpc.ParseFromString(data)
                self.rpcs.append(rpc)
            return data

        monkeypatch.setattr(pubsub_module, "read_varint_prefixed_bytes_limited", reading)

    def about(self, msg_id: bytes) -> list[rpc_pb2.RPC]:
        """The RPCs that carry the message ``msg_id`` or an IDONTWANT for it."""
        return [rpc for rpc in self.rpcs
                if msg_id in _published(rpc) or msg_id in _unwanted(rpc)]


def _published(rpc: rpc_pb2.RPC) -> list[bytes]:
    return [m.from_id + m.seqno for m in rpc.publish]


def _unwanted(rpc: rpc_pb2.RPC) -> list[bytes]:
    return [i for entry in rpc.control.idontwant for i in entry.messageIDs]


@asynccontextmanager
async def _line(config: P2PConfig) -> AsyncIterator[tuple[P2PHost, P2PHost, P2PHost, Any]]:
    """A - B - C meshed on TOPIC (A and C not connected); C's inbox."""
    async with open_host(Ed25519PrivateKey.generate(), config, clock=SystemClock()) as a, \
            open_host(Ed25519PrivateKey.generate(), config, clock=SystemClock()) as b, \
            open_host(Ed25519PrivateKey.generate(), config, clock=SystemClock()) as c:
        await a.subscribe(TOPIC)
        await b.subscribe(TOPIC)
        inbox = await c.subscribe(TOPIC)
        await a.connect(b.listen_addrs[0])
        await c.connect(b.listen_addrs[0])
        await until(lambda: b.mesh_peers(TOPIC) == sorted((a.peer_id, c.peer_id))
                    and a.mesh_peers(TOPIC) == [b.peer_id]
                    and c.mesh_peers(TOPIC) == [b.peer_id], 30, "not meshed")
        yield a, b, c, inbox


def _config(on: bool) -> P2PConfig:
    return P2PConfig(gossip_idontwant=on, gossip_strict_signing=False)


@pytest.mark.trio
@pytest.mark.timeout(90)
async def test_g6_idontwant_goes_before_validation_and_rides_with_the_forward(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """B tells C before its (slow) validator returns; with synchronous validation the forward
    and the IDONTWANT are one RPC; a message under 1 KiB gets none."""
    reads = _Reads(monkeypatch)
    async with _line(_config(True)) as (a, b, c, inbox):
        reads.sender = ID.from_base58(b.peer_id)
        peer_c = ID.from_base58(c.peer_id)
        assert _router(b).protocols[0] == PROTOCOL_ID_V12
        assert _router(b).peer_protocol[peer_c] == PROTOCOL_ID_V12

        # 1. A slow validator on B: the IDONTWANT reaches C while it waits.
        release = trio.Event()
        validating = 0

        async def slow(_forwarder: ID, _msg: rpc_pb2.Message) -> bool:
            nonlocal validating
            validating += 1
            await release.wait()
            return True

        _pubsub(b).set_topic_validator(TOPIC, slow, True)
        await a.publish(TOPIC, b"slow" + bytes(BIG))
        await until(lambda: any(_unwanted(r) for r in reads.rpcs), 10, "no IDONTWANT at C")
        assert validating == 1 and not release.is_set()
        (early,) = [r for r in reads.rpcs if _unwanted(r)]
        assert not early.publish  # nothing else was queued for C: it went alone
        release.set()
        with trio.fail_after(10):
            delivered = await inbox.receive()
        msg_id = _unwanted(early)[0]
        assert [m for r in reads.rpcs for m in _published(r)] == [msg_id]
        assert delivered.data.startswith(b"slow")
        sent, alone = b.stats.gossip_idontwant_sent, b.stats.gossip_idontwant_rpcs
        assert (sent, alone) == (1, 1)
        # Served under these names on /metrics.
        metrics = Metrics()
        register_p2p_metrics(metrics, b)
        assert metrics.value("p2p_gossip_idontwant_sent_total") == 1.0
        assert metrics.value("p2p_gossip_idontwant_rpcs_total") == 1.0

        # 2. Synchronous validation: the forward joins the queued IDONTWANT, one RPC.
        _pubsub(b).remove_topic_validator(TOPIC)
        reads.rpcs.clear()
        await a.publish(TOPIC, b"sync" + bytes(BIG))
        with trio.fail_after(10):
            assert (await inbox.receive()).data.startswith(b"sync")
        (rpc,) = [r for r in reads.rpcs if r.publish]
        assert _published(rpc) == _unwanted(rpc)
        assert len(reads.about(_published(rpc)[0])) == 1
        assert b.stats.gossip_idontwant_sent == sent + 1

        # 3. Under 1 KiB: no IDONTWANT.
        reads.rpcs.clear()
        await a.publish(TOPIC, b"small" + bytes(THRESHOLD_BYTES - 100))
        with trio.fail_after(10):
            assert (await inbox.receive()).data.startswith(b"small")
        assert [r for r in reads.rpcs if r.publish] and not any(map(_unwanted, reads.rpcs))
        assert b.stats.gossip_idontwant_sent == sent + 1


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_g6_is_off_by_default_and_nothing_of_it_is_installed() -> None:
    """The node's default config: 1.1.0 and 1.0.0 offered, G3's send path, no receipt hook,
    0.8.1's after-validation emission behind G4, and no IDONTWANT sent."""
    config = p2p_config(load_config(env={}, overrides={"p2p.listen": ("/ip4/127.0.0.1/tcp/0",)}))
    assert config.gossip_idontwant is False
    on = load_config(env={"SYNCNODE_P2P_GOSSIP_IDONTWANT": "true"},
                     overrides={"p2p.listen": ("/ip4/127.0.0.1/tcp/0",)})
    assert p2p_config(on).gossip_idontwant is True
    async with _line(config) as (a, b, _c, inbox):
        router = _router(b)
        assert PROTOCOL_ID_V12 not in router.protocols
        assert _pubsub(b)._on_receipt is None
        assert getattr(router.send_rpc, "__self__", None) is None  # G3's function, not G6's
        assert router._emit_idontwant_for_message.__name__ == "idontwant"  # G4's wrapper
        await a.publish(TOPIC, bytes(BIG))
        with trio.fail_after(10):
            await inbox.receive()
        assert b.stats.gossip_idontwant_sent == 0 == b.stats.gossip_idontwant_rpcs
