"""Dialing helpers: DNS multiaddrs, a fresh dial, and a verifying probe dial (what ``join``
relies on).

``resolve_dns`` turns ``/dns4``, ``/dns6`` and ``/dns`` multiaddrs into IP ones: py-libp2p 0.8.1
keeps the peerstore address as given and its dial path only takes IP addresses there.

``probe`` dials an address on a fresh TCP connection and runs the Noise handshake with the
expected peer id, then closes it. It proves that *this address* reaches *that peer* even when we
are already connected to the peer over another connection (libp2p's own connect would just
reuse that one and prove nothing).
"""

from __future__ import annotations

import contextlib
import socket

import multiaddr
import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr

from node.p2p.frames import DialError

__all__ = [
    "DNS_PROTOCOLS",
    "bind_problem",
    "dial_fresh",
    "dial_target",
    "probe",
    "resolve_dns",
    "unbindable_listen_addr",
]

DNS_PROTOCOLS = {"dns": socket.AF_UNSPEC, "dns4": socket.AF_INET, "dns6": socket.AF_INET6}


async def resolve_dns(address: str) -> str:
    """``address`` with a leading ``/dns*/NAME`` replaced by the first address NAME resolves to."""
    parts = address.split("/")
    if len(parts) < 3 or parts[1] not in DNS_PROTOCOLS:
        return address
    name = parts[2]
    try:
        infos = await trio.socket.getaddrinfo(name, None, DNS_PROTOCOLS[parts[1]],
                                              socket.SOCK_STREAM)
    except OSError as exc:
        raise DialError(f"cannot resolve {name!r} in {address}: {exc}") from None
    for family, _type, _proto, _name, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            proto = "ip4" if family == socket.AF_INET else "ip6"
            return "/".join(["", proto, str(sockaddr[0]), *parts[3:]])
    raise DialError(f"{name!r} in {address} resolves to no IP address")


async def dial_target(address: str, timeout: float) -> tuple[PeerInfo, str]:
    """The peer an ``/.../p2p/<peer id>`` address names, and the address with DNS resolved.

    :raises DialError: not a dialable multiaddr, or resolving took longer than ``timeout``.
    """
    try:
        info = info_from_p2p_addr(multiaddr.Multiaddr(address))
    except Exception as exc:
        raise DialError(f"not a dialable /p2p multiaddr: {address!r} ({exc})") from exc
    try:
        with trio.fail_after(timeout):
            resolved = await resolve_dns(address)
    except trio.TooSlowError:
        raise DialError(f"resolving {address} timed out") from None
    if resolved != address:
        info = info_from_p2p_addr(multiaddr.Multiaddr(resolved))
    return info, resolved


async def dial_fresh(host: IHost, info: PeerInfo, address: str, timeout: float) -> None:
    """Dial ``info`` at exactly its given address; :class:`DialError` when it fails."""
    # libp2p remembers failed peers for 60 s and refuses to redial them; the daemon runs
    # its own back-off, so an explicit connect always gets a real attempt.
    unblock = getattr(host.get_network(), "unblock_peer", None)
    if unblock is not None:
        unblock(info.peer_id)
    # Dial exactly the address we were given: a stale one left in the peerstore by an
    # earlier run of that peer (it restarted on a new port) makes the whole dial fail.
    host.get_peerstore().clear_addrs(info.peer_id)
    try:
        with trio.fail_after(timeout):
            await host.connect(info)
    except trio.TooSlowError as exc:
        raise DialError(f"dial to {address} timed out after {timeout}s") from exc
    except Exception as exc:
        raise DialError(
            f"dial to {address} failed: {exc} (if the peer runs a closed group, it may not "
            "admit our peer id)"
        ) from exc
    if not host.get_network().get_connections(info.peer_id):
        raise DialError(
            f"connection to {info.peer_id.to_base58()} closed right after it opened (refused?)"
        )


async def probe(host: IHost, address: str, peer_id: str, timeout: float) -> None:
    """Dial ``address`` (IP form) on a new connection and authenticate ``peer_id`` there.

    :raises DialError: unreachable, not a libp2p node, or a different peer answers.
    """
    network = host.get_network()
    maddr = multiaddr.Multiaddr(address)
    transport = network.transport_manager.transport_for_dialing(maddr)  # type: ignore[attr-defined]
    if transport is None:
        raise DialError(f"no transport can dial {address}")
    try:
        with trio.fail_after(timeout):
            raw = await transport.dial(maddr)
            try:
                secured = await network.upgrader.upgrade_security(  # type: ignore[attr-defined]
                    raw, True, ID.from_base58(peer_id)
                )
            except BaseException:
                with contextlib.suppress(Exception):
                    await raw.close()
                raise
            with contextlib.suppress(Exception):
                await secured.close()
    except trio.TooSlowError:
        raise DialError(f"dial to {address} timed out after {timeout}s") from None
    except Exception as exc:
        cause = exc.__cause__ or exc
        text = f"{exc} {cause}".lower()
        if "mismatch" in text or "does not correspond" in text:
            raise DialError(f"{address} is not peer {peer_id}: another node answers there") \
                from None
        raise DialError(f"dial to {address} failed: {cause}") from None


def bind_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound for listening right now (None: it can, or port 0).

    The listeners set SO_REUSEADDR only, like this check, so it predicts their bind.
    """
    if port == 0:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(1)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def unbindable_listen_addr(addresses: list[str] | tuple[str, ...]) -> tuple[str, str] | None:
    """The first ``/ip4|ip6/HOST/tcp/PORT`` listen address that cannot be bound, and why."""
    for address in addresses:
        parts = address.split("/")
        usable = len(parts) >= 5 and parts[1] in ("ip4", "ip6") and parts[4].isdigit()
        if usable and (problem := bind_problem(parts[2], int(parts[4]))):
            return address, problem
    return None
