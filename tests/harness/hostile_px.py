"""Hostile peer exchange against a real node process (issue 38, findings 2 and 3): for the
tests and the attack benchmark. Every host here is a real py-libp2p host with Noise.

* :func:`px_internal_dials`: a peer the victim reaches at a LAN address hands it signed
  records whose addresses are loopback ports (canary TCP listeners, and the victim's own API
  port). How many connections reach the canaries?
* :func:`book_share_of_one_source`: one peer hands the victim the records of many identities
  that really listen (so the victim's dials succeed). How many does the book keep?
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager

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
from tests.harness.cluster import metric, wait_for
from tests.harness.procs import NodeApi

__all__ = ["book_share_of_one_source", "lan_ip", "px_internal_dials"]

PX_BATCH = 16  # records per answer: membership.px_max_records (more is a protocol error)


def lan_ip() -> str:
    """An IPv4 address of this machine that is not loopback: a hostile host listening there
    is, to the victim, a peer on another network than its own host."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.123", 9))  # no packet is sent: this only picks a route
        ip = str(probe.getsockname()[0])
    if ip.startswith("127."):
        raise RuntimeError("this machine has no non-loopback IPv4 address to test from")
    return ip


def _record(addrs: list[str]) -> bytes:
    key = create_new_key_pair()
    return LocalRecord(ID.from_pubkey(key.public_key), key.private_key, addrs).envelope


@asynccontextmanager
async def _px_server(listen_ip: str, records: Callable[[], list[bytes]]
                     ) -> AsyncIterator[P2PHost]:
    """A host on ``listen_ip`` answering every peer exchange with ``records()``."""
    async def serve(stream: FramedStream) -> None:
        await stream.receive()
        await stream.send(encode_records(records()))

    config = P2PConfig(listen_addrs=(f"/ip4/{listen_ip}/tcp/0",))
    async with open_host(Ed25519PrivateKey.generate(), config, clock=SystemClock()) as host:
        host.set_stream_handler(PX_PROTOCOL, serve)
        yield host


class _Canaries:
    """Plain TCP listeners on 127.0.0.1 that count the connections they accept."""

    def __init__(self) -> None:
        self.hits = 0
        self.ports: list[int] = []

    async def open(self, nursery: trio.Nursery, count: int, ip: str = "127.0.0.1") -> None:
        for _ in range(count):
            listeners = await trio.open_tcp_listeners(0, host=ip)
            self.ports.append(listeners[0].socket.getsockname()[1])
            nursery.start_soon(trio.serve_listeners, self._count, listeners)

    async def _count(self, stream: trio.SocketStream) -> None:
        self.hits += 1
        await stream.aclose()


async def _join(victim: NodeApi, host: P2PHost) -> None:
    """The user joins ``host`` (``syncnode join``'s API call: no CLI process to start)."""
    await trio.to_thread.run_sync(victim.post, "/v1/peers", {"multiaddr": host.listen_addrs[0]})


def _attacker_entries(victim: NodeApi, attacker: str) -> list[dict[str, object]]:
    return [e for e in victim.get("/v1/peers/book")["entries"] if e["source"] == attacker]


async def px_internal_dials(victim: NodeApi, canaries: int = 8) -> tuple[int, float]:
    """(connections the victim opened to loopback canaries, addresses it refused) after a
    peer at this machine's LAN address handed it records of ``canaries`` loopback listeners,
    of its own API port, and of one LAN listener (the control: a dial that may happen, so
    that we know the victim dialled what it kept)."""
    ip = lan_ip()
    api_port = int(victim.api_url.rsplit(":", 1)[1])
    async with trio.open_nursery() as nursery:
        inside, control = _Canaries(), _Canaries()
        await inside.open(nursery, canaries)
        await control.open(nursery, 1, ip)
        records = [_record([f"/ip4/127.0.0.1/tcp/{p}"]) for p in inside.ports]
        records += [_record([f"/ip4/127.0.0.1/tcp/{api_port}"]),
                    _record([f"/ip4/{ip}/tcp/{control.ports[0]}"])]
        async with _px_server(ip, lambda: records) as host:
            await _join(victim, host)

            def dialled_all() -> bool:  # every entry it kept from us was dialled once
                entries = _attacker_entries(victim, host.peer_id)
                return control.hits > 0 and all(int(str(e["failures"])) > 0 for e in entries)

            await trio.to_thread.run_sync(wait_for, dialled_all, 90,
                                          "the victim did not dial what it kept")
            refused = await trio.to_thread.run_sync(
                metric, victim, 'peer_addrs_refused_total{reason="loopback",via="px"}')
        nursery.cancel_scope.cancel()
    return inside.hits, refused


async def book_share_of_one_source(victim: NodeApi, identities: int, bound: int,
                                   rounds: int = 4) -> int:
    """How many of one source's records the victim's book holds after it dialled (and
    reached) some of them (4, or ``bound`` if fewer: it dials up to its low watermark only)
    and asked that source ``rounds`` more times."""
    async with AsyncExitStack() as stack:
        # Over four /16s of 127/8 (all loopback): the book's bound per network must not be
        # the one that stops them.
        live = [await stack.enter_async_context(open_host(
                    Ed25519PrivateKey.generate(),
                    P2PConfig(listen_addrs=(f"/ip4/127.{1 + i % 4}.0.1/tcp/0",)),
                    clock=SystemClock()))
                for i in range(identities)]
        records = [h.local_record.envelope for h in live]
        ids = {h.peer_id for h in live}
        turns = itertools.count()

        def batch() -> list[bytes]:  # the next PX_BATCH of them, round and round
            start = next(turns) * PX_BATCH % len(records)
            return (records + records)[start:start + min(PX_BATCH, len(records))]

        host = await stack.enter_async_context(_px_server("127.0.0.1", batch))
        await _join(victim, host)
        dials = 'membership_dials_total{kind="dial",result="ok"}'
        reached = min(bound, 4)
        await trio.to_thread.run_sync(wait_for, lambda: metric(victim, dials) >= reached, 90,
                                      "the victim did not dial the records it took")
        asked = 'px_exchanges_total{result="ok",role="asked"}'
        then = await trio.to_thread.run_sync(metric, victim, asked)
        await trio.to_thread.run_sync(wait_for, lambda: metric(victim, asked) >= then + rounds,
                                      120, "the victim stopped asking for records")
        book = await trio.to_thread.run_sync(victim.get, "/v1/peers/book")
    return sum(e["peer_id"] in ids for e in book["entries"])
