"""Address scope inside py-libp2p (``node.p2p.scope_guard``) with real hosts: a peer we reach at
this machine's LAN address cannot aim a hole-punch dial at loopback, nor make identify record a
private address of ours; a PRUNE's peer records are never dialled. Each refusal is counted."""

from __future__ import annotations

import multiaddr
import pytest
import trio
import trio.testing
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2

from node.clock import SystemClock
from node.p2p import P2PConfig
from node.p2p.records import LocalRecord
from node.p2p.run import open_host
from sync.reachability import ReachabilityConfig
from tests.harness.hostile_px import lan_ip

pytestmark = pytest.mark.timeout(120)


async def _canary(nursery: trio.Nursery, hits: list[int]) -> int:
    async def count(stream: trio.SocketStream) -> None:
        hits.append(1)
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    nursery.start_soon(trio.serve_listeners, count, listeners)
    return int(listeners[0].socket.getsockname()[1])


@pytest.mark.trio
async def test_a_remote_peer_cannot_aim_punches_observations_or_gossip_px_inward() -> None:
    ip = lan_ip()
    victim_config = P2PConfig(reachability=ReachabilityConfig())
    stranger_config = P2PConfig(listen_addrs=(f"/ip4/{ip}/tcp/0",))
    hits: list[int] = []
    clock = SystemClock()
    async with open_host(Ed25519PrivateKey.generate(), victim_config, clock=clock) as victim, \
            open_host(Ed25519PrivateKey.generate(), stranger_config, clock=clock) as stranger, \
            trio.open_nursery() as nursery:
        port = await _canary(nursery, hits)
        await victim.connect(stranger.listen_addrs[0])  # we reach it at the LAN address
        peer = ID.from_base58(stranger.peer_id)
        assert victim.source_ip(stranger.peer_id) == ip
        assert victim.relay is not None
        dcutr = victim.relay.dcutr
        # A punch dial the stranger asks for, at a loopback port of ours: refused.
        await dcutr._dial_peer(peer, multiaddr.Multiaddr(f"/ip4/127.0.0.1/tcp/{port}"))
        assert victim.addr_refused["punch", "loopback"] == 1
        # Identify: the stranger says it sees us at a private address: not recorded.
        manager = victim.libp2p_host._observed_addr_manager  # type: ignore[attr-defined]
        [conn] = victim.libp2p_host.get_network().get_connections(peer)
        manager.record_observation(conn, multiaddr.Multiaddr("/ip4/10.1.2.3/tcp/4001"),
                                   victim.libp2p_host.get_transport_addrs())
        assert victim.addr_refused["observed", "private"] == 1
        # GossipSub PX: a PRUNE listing a signed record of the canary is never dialled.
        key = create_new_key_pair()
        record = LocalRecord(ID.from_pubkey(key.public_key), key.private_key,
                             [f"/ip4/127.0.0.1/tcp/{port}"])
        info = rpc_pb2.PeerInfo(peerID=ID.from_pubkey(key.public_key).to_bytes(),
                                signedPeerRecord=record.envelope)
        prune = rpc_pb2.ControlPrune(topicID="t", peers=[info])
        await victim._gossip._router.handle_prune(prune, peer)
        assert victim.addr_refused["gossip_px", "ignored"] == 1
        # A dial to the canary would be accepted (and counted) before every task waits.
        await trio.testing.wait_all_tasks_blocked(0.1)
        assert hits == []
        nursery.cancel_scope.cancel()
