"""``/syncnode/dialback/1.0.0``: "dial me back", the evidence our reachability verdict rests on.

py-libp2p 0.8.1's AutoNAT is unusable here (DESIGN §11: its client sends wildcard addresses,
its server answers from the existing connection without dialling back, and identify needs four
observers), so we ask ourselves. The requester sends its listen port (2 bytes). The server dials
a *new* connection to the IP it sees the requester on (never any other IP: no amplification
towards third parties), at that port, authenticates the requester's peer id there (Noise), and
answers ``ok`` + that IP as text. A server answers each peer at most once per ``min_gap_s`` and
runs at most ``max_parallel`` dial-backs at once; refusals are counted.
"""

from __future__ import annotations

import logging

import trio
from libp2p.abc import IHost

from node.clock import Clock
from node.p2p.addrs import probe
from node.p2p.frames import DialError, FramedStream, P2PError

__all__ = ["DIALBACK_PROTOCOL", "DialBackServer", "parse_answer"]

DIALBACK_PROTOCOL = "/syncnode/dialback/1.0.0"
logger = logging.getLogger("node.p2p.dialback")


def parse_answer(data: bytes) -> tuple[bool, str]:
    """``(ok, ip)`` from a server's answer; :class:`P2PError` if malformed."""
    text = data.decode("ascii", "replace")
    verdict, _, ip = text.partition(" ")
    if verdict not in ("ok", "fail") or not ip or len(ip) > 64:
        raise P2PError(f"malformed dial-back answer {text[:80]!r}")
    return verdict == "ok", ip


class DialBackServer:
    """Serves dial-back requests for one host."""

    def __init__(self, host: IHost, remote_ip: object, timeout: float, min_gap_s: float,
                 clock: Clock, max_parallel: int = 4) -> None:
        self._host = host
        self._clock = clock
        self._remote_ip = remote_ip  # callable: peer id -> direct remote IP or None
        self._timeout = timeout
        self._min_gap_s = min_gap_s
        self._slots = trio.Semaphore(max_parallel)
        self._last: dict[str, float] = {}
        self.served = 0
        self.refused = 0

    async def handle(self, stream: FramedStream) -> None:
        peer = stream.peer_id
        request = await stream.receive()
        if len(request) != 2:
            self.refused += 1
            return
        port = int.from_bytes(request, "big")
        ip = self._remote_ip(peer)  # type: ignore[operator]
        now = self._clock.now()
        last = self._last.get(peer)
        if ip is None or port == 0 or (last is not None and now - last < self._min_gap_s):
            self.refused += 1  # relayed (no IP of its own), bad port, or asking too often
            await stream.send(b"fail -")
            return
        self._last[peer] = now
        if len(self._last) > 4096:
            self._last = {p: t for p, t in self._last.items() if now - t < self._min_gap_s}
        family = "ip6" if ":" in ip else "ip4"
        async with self._slots:
            try:
                await probe(self._host, f"/{family}/{ip}/tcp/{port}", peer, self._timeout)
                ok = True
            except DialError as exc:
                logger.debug("dial-back to %s at %s:%d failed: %s", peer, ip, port, exc)
                ok = False
        self.served += 1
        await stream.send(f"{'ok' if ok else 'fail'} {ip}".encode())
