"""A dial-back liar for tests/net (run inside a namespace: ``python -m tests.net.liar LISTEN
CLAIM``): a real libp2p host listening on ``LISTEN`` that answers every dial-back request with
``ok CLAIM`` and dials nothing. Prints its multiaddr (with peer id) once it listens, then runs
until killed."""

from __future__ import annotations

import sys

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.clock import SystemClock
from node.p2p import FramedStream, P2PConfig
from node.p2p.dialback import DIALBACK_PROTOCOL
from node.p2p.run import open_host


async def main(listen: str, claim: str) -> None:
    async def lie(stream: FramedStream) -> None:
        await stream.receive()
        await stream.send(f"ok {claim}".encode())

    config = P2PConfig(listen_addrs=(listen,), reachability=None)
    async with open_host(Ed25519PrivateKey.generate(), config, clock=SystemClock()) as host:
        host.set_stream_handler(DIALBACK_PROTOCOL, lie)
        print(f"{listen}/p2p/{host.peer_id}", flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
