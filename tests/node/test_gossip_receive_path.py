"""The per-message cost of py-libp2p 0.8.1's pubsub receive and validation path,
cut in ``node.p2p.compat`` (entries V1, V2, P8, R3, G1): counted on real hosts, never timed.

- V1: ``ValidationCache.put`` scanned a list per message; ours is O(1) and still bounded.
- V2: the publisher verified its own signature; each message is now verified once, by its
  receiver, and a forged one is still refused.
- P8: no task spawned per received message, no base58 work per message or RPC.
- R3: the signed peer record goes once per stream, not on every RPC.
- G1: no list grows by one entry per message.

The only wrappers count calls and call through.
"""

from __future__ import annotations

import time
from typing import Any

import base58
import libp2p.pubsub.pubsub as pubsub_module
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p.crypto.ed25519 import Ed25519PublicKey
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import ValidationResult

from node.clock import SystemClock
from node.p2p import P2PHost, compat
from node.p2p.run import open_host
from tests.harness.gossip_pair import meshed_pair, send_one_by_one

TOPIC = "receive-path"
SIGNED = b"libp2p-pubsub:"


def _meshed() -> Any:
    return meshed_pair(TOPIC)


async def _send(sender: P2PHost, inbox: Any, count: int) -> None:
    await send_one_by_one(sender, inbox, TOPIC, count)


class _Key:
    """A message id whose comparisons are counted (a list scan compares each element)."""

    compared = 0

    def __init__(self, n: int) -> None:
        self.n = n

    def __hash__(self) -> int:
        return hash(self.n)

    def __eq__(self, other: object) -> bool:
        _Key.compared += 1
        return isinstance(other, _Key) and other.n == self.n


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_v1_validation_cache_is_constant_time_and_bounded() -> None:
    async with open_host(Ed25519PrivateKey.generate(), clock=SystemClock()) as host:
        cache = host._gossip._pubsub.validation_cache
        size = cache.max_size
        assert size == 1000  # libp2p's default bound is kept
        ok = ValidationResult(is_valid=True, timestamp=time.time())
        for n in range(size):
            cache.put(_Key(n), ok)
        _Key.compared = 0
        for n in range(size, size + 100):
            cache.put(_Key(n), ok)
        # A list scan per put: ~1,000 comparisons each; a hash table: none or a few.
        assert _Key.compared < 100
        assert len(cache.cache) == size
        assert cache.get(_Key(0)) is None  # the oldest went first
        assert cache.get(_Key(150)) is ok
        cache.put(_Key(size + 100), ok)  # evicts the least recently used: 100, not 150
        assert cache.get(_Key(150)) is ok and cache.get(_Key(100)) is None


@pytest.mark.trio
@pytest.mark.timeout(90)
async def test_v2_each_message_is_verified_once_by_its_receiver(
        monkeypatch: pytest.MonkeyPatch) -> None:
    verified: list[bytes] = []
    original = Ed25519PublicKey.verify

    def counted(self: Ed25519PublicKey, data: bytes, signature: bytes) -> bool:
        if data.startswith(SIGNED):
            verified.append(data)
        return original(self, data, signature)

    monkeypatch.setattr(Ed25519PublicKey, "verify", counted)
    async with _meshed() as (sender, _receiver, inbox):
        verified.clear()
        await _send(sender, inbox, 20)
        assert len(verified) == 20  # the receiver's check; 0.8.1 also checked the sender's own

        # Strict signing still refuses what is not signed by the sender it names.
        pubsub = sender._gossip._pubsub
        check = pubsub_module.signature_validator
        msg = rpc_pb2.Message(data=b"x", topicIDs=[TOPIC], from_id=pubsub.my_id.to_bytes(),
                              seqno=(1).to_bytes(8, "big"))
        msg.signature = pubsub.sign_key.sign(SIGNED + msg.SerializeToString())
        assert check(msg)  # not the object being published: checked, and good
        tampered = rpc_pb2.Message()
        tampered.CopyFrom(msg)
        tampered.data = b"y"
        assert not check(tampered)
        other = rpc_pb2.Message()
        other.CopyFrom(msg)
        other.from_id = ID.from_base58(_receiver.peer_id).to_bytes()  # claims another sender
        assert not check(other)
        unsigned = rpc_pb2.Message()
        unsigned.CopyFrom(msg)
        unsigned.ClearField("signature")
        assert not check(unsigned)


class _Spawns(trio.abc.Instrument):
    def __init__(self) -> None:
        self.count = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.count += 1


@pytest.mark.trio
@pytest.mark.timeout(90)
async def test_p8_no_task_and_no_base58_work_per_received_message(
        monkeypatch: pytest.MonkeyPatch) -> None:
    encoded = [0]
    original = base58.b58encode

    def counted(data: Any, *args: Any, **kwargs: Any) -> bytes:
        encoded[0] += 1
        return original(data, *args, **kwargs)

    monkeypatch.setattr(base58, "b58encode", counted)
    async with _meshed() as (sender, _receiver, inbox):
        await _send(sender, inbox, 5)  # every peer id seen once
        spawns = _Spawns()
        trio.lowlevel.add_instrument(spawns)
        encoded[0] = 0
        try:
            await _send(sender, inbox, 200)
        finally:
            trio.lowlevel.remove_instrument(spawns)
        # 0.8.1 spawned a task per message received (200 here) and encoded the sender's id
        # per message; a few of either come from heartbeats.
        assert spawns.count < 50, spawns.count
        assert encoded[0] < 50, encoded[0]


@pytest.mark.trio
@pytest.mark.timeout(90)
async def test_r3_the_signed_record_goes_once_per_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    compat.apply()  # wrap what the hosts will call, not what apply() replaces
    with_record = [0]
    original = pubsub_module.maybe_consume_signed_record

    def counted(msg: rpc_pb2.RPC, host: Any, peer_id: ID) -> bool:
        if msg.HasField("senderRecord"):
            with_record[0] += 1
        return bool(original(msg, host, peer_id))

    monkeypatch.setattr(pubsub_module, "maybe_consume_signed_record", counted)
    async with _meshed() as (sender, receiver, inbox):
        await _send(sender, inbox, 50)
        # The hello of each stream carries it (and a changed record would go again); 0.8.1
        # sent it on every one of the 50 publishes too.
        assert with_record[0] <= 6, with_record[0]
        assert receiver.peer_id in sender.mesh_peers(TOPIC)


@pytest.mark.trio
@pytest.mark.timeout(90)
async def test_g1_no_list_grows_with_every_message() -> None:
    """0.8.1 appends every message's time to ``recent_message_deliveries`` and prunes it only
    in adaptive gossip's health check, which the node turns off: it grew for ever."""
    async with _meshed() as (sender, receiver, inbox):
        await _send(sender, inbox, 200)
        for host in (sender, receiver):
            kept = host._gossip._router.recent_message_deliveries
            assert sum(len(times) for times in kept.values()) == 0
