"""Redialling a peer whose peerstore entry expired (issue 37, finding 3).

``host.connect`` stores a peer's addresses with a 120-s TTL in py-libp2p 0.8.1, and the peer's
signed record (sent on every pubsub RPC) is consumed once. Two minutes after a connect, 0.8.1's
``clear_addrs`` (which ``dial_fresh`` calls before every redial) raised
``PeerStoreError('peer ID is expired')`` out of the redial loop and ended the daemon. Real hosts
and a real signed record; the two minutes are the entry's ``last_identified`` set back (libp2p
reads ``time.time()`` itself).
"""

from __future__ import annotations

import libp2p.pubsub.pubsub as pubsub_module
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p.peer.id import ID
from libp2p.peer.peerstore import issue_and_cache_local_record
from libp2p.pubsub.pb.rpc_pb2 import RPC

from node.clock import SystemClock
from node.p2p import P2PConfig
from node.p2p.run import open_host
from tests.harness.cluster import until


def _key(n: int) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(bytes([n]) * 32)


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_redial_after_the_peerstore_entry_expired() -> None:
    async with open_host(_key(71), P2PConfig(), clock=SystemClock()) as a, \
            open_host(_key(72), P2PConfig(), clock=SystemClock()) as b:
        b_id = ID.from_base58(b.peer_id)
        address = b.listen_addrs[0]
        assert await a.connect(address) == b.peer_id
        # b's signed record as its pubsub RPCs carry it, taken the way a's pubsub takes it.
        rpc = RPC()
        rpc.senderRecord = issue_and_cache_local_record(b.libp2p_host)
        assert pubsub_module.maybe_consume_signed_record(rpc, a.libp2p_host, b_id)
        store = a.libp2p_host.get_peerstore()
        assert b_id in store.peer_record_map  # type: ignore[attr-defined]
        await a.disconnect(b.peer_id)
        await until(lambda: not a.connected_peers(), 10, "still connected")
        entry = store.peer_data_map[b_id]  # type: ignore[attr-defined]
        entry.last_identified -= entry.get_ttl() + 60  # the entry's TTL ran out a minute ago
        assert entry.is_expired()

        assert await a.connect(address) == b.peer_id  # the redial works, nothing raised
        assert a.connected_peers() == [b.peer_id]
