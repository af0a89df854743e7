"""A hostile libp2p host speaking our transfer protocols: for the hostile-peer tests and the
attack benchmark. Everything here is a real py-libp2p host with Noise, on 127.0.0.1."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import random
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p.peer.id import ID

from node.clock import SystemClock
from node.p2p import FramedStream, P2PConfig, P2PError, P2PHost
from node.p2p.run import open_host
from node.replication import topic_of
from node.replication.fetch import FETCH_PROTOCOL
from node.replication.recon import RECON_PROTOCOL

# Frames from node.replication.recon_wire (not sync.transfer): this also runs against older code.
from node.replication.recon_wire import (
    BUSY,
    EVENTS_LAST,
    RECON,
    WANT_LAST,
    pack_items,
    unpack_items,
)
from sync.recon import MemoryKeyStore
from sync.recon.eventid import channel_bounds
from sync.recon.reads import ReadKeys
from sync.recon.session import MissingKeys, ReconConfig, ReconSession
from sync.recon.wire import KEYS, Limits, MessageWriter
from tests.harness.cluster import until
from tests.harness.procs import NodeProcess

__all__ = [
    "amplify",
    "fetch_and_stall",
    "gossip",
    "hostile",
    "key_list_bomb",
    "meshed",
    "peak_rss_mib",
    "recon_and_answer",
    "recon_and_serve",
    "recon_and_withhold",
    "recon_first_message",
    "recon_flood",
    "recon_flood_frame",
    "stored_ids",
    "want_and_stall",
    "window_flood",
]


@asynccontextmanager
async def hostile(target: str) -> AsyncIterator[tuple[P2PHost, str]]:
    """A fresh hostile host (new key, so a new peer id) connected to ``target``."""
    key = Ed25519PrivateKey.generate()
    # Our side allows huge frames so that it can send one the node must refuse.
    config = P2PConfig(max_frame_bytes=16 << 20, read_timeout=10)
    async with open_host(key, config, clock=SystemClock()) as host:
        yield host, await host.connect(target)


async def meshed(host: P2PHost, peer: str, topic: str, timeout: float = 30.0) -> None:
    """Wait until ``peer`` is in our GossipSub mesh of ``topic``: from then on a publish reaches
    it as a full message (a fixed pause for the mesh to form cost seconds per hostile host, and
    was still a guess on a loaded machine). Fails after ``timeout``."""
    await until(lambda: peer in host.mesh_peers(topic), timeout, f"{peer} not in our {topic} mesh")


async def gossip(target: str, channel: str, wires: list[bytes], *,
                 arrived: Callable[[], bool] | None = None, timeout: float = 60.0,
                 pace: float | Callable[[bytes], float] = 0.0, linger: float = 0.0,
                 key: Ed25519PrivateKey | None = None) -> float:
    """Publish ``wires`` on ``channel``'s topic from a fresh host (or one of ``key``) in
    ``target``'s mesh, ``pace`` seconds apart (the attack's shape; a function of the wire
    just sent: a pause for some only), and stay connected until
    ``arrived()`` holds (asked in a thread: it may read the node's API), so that nothing queued
    is lost when the host closes; fails if it does not hold within ``timeout``. ``linger``:
    a fixed stay instead, for a caller with nothing to observe. Returns the seconds the
    publishing took (from the first publish to the last), what a rate limit is judged over."""
    async with open_host(key or Ed25519PrivateKey.generate(), P2PConfig(read_timeout=10),
                         clock=SystemClock()) as host:
        peer = await host.connect(target)
        topic = topic_of(1, channel)
        await host.subscribe(topic)
        await meshed(host, peer, topic)
        started = trio.current_time()
        for wire in wires:
            await host.publish(topic, wire)
            if pause := pace(wire) if callable(pace) else pace:
                await trio.sleep(pause)
        took = trio.current_time() - started
        if arrived is not None:
            await until(lambda: trio.to_thread.run_sync(arrived), timeout,
                        "the node did not show the gossip's effect")
        if linger:
            await trio.sleep(linger)
        return took


async def window_flood(target: str, total: int, timeout: float = 120.0) -> tuple[str, int]:
    """Write ``total`` bytes, ignoring Yamux flow control, on the stream ``target`` opened to
    us for its gossip (the node writes on it and never reads it: each byte past the window
    it granted, 256 KiB, is the node's to hold). Libp2p's own ``write``, with the stream's
    ``send_window`` set huge: 64 KiB frames as an honest sender's, only too many. Returns our
    peer id and the bytes written until the node cut the connection (``total`` if it never
    did)."""
    async with hostile(target) as (host, peer):
        network = host.libp2p_host.get_network()

        def gossip_stream() -> Any:
            for conn in network.get_connections(ID.from_base58(peer)):
                for stream in conn.get_streams():
                    muxed = cast(Any, stream).muxed_stream  # NetStream's, not in INetStream
                    if "sub" in str(stream.get_protocol()) and not muxed.is_initiator:
                        return muxed
            return None

        await until(gossip_stream, 30, "the node opened no gossip stream to us")
        muxed = gossip_stream()
        muxed.send_window = 1 << 40
        block, written = b"\x00" * 65524, 0  # one frame each (libp2p's 64 KiB less header)
        with trio.fail_after(timeout):
            try:
                while written < total:
                    await muxed.write(block)
                    written += len(block)
            except Exception:  # the node ended the connection: the attack's expected end
                pass
        return host.peer_id, written


def stored_ids(node: NodeProcess, channel: str = "general") -> set[str]:
    """Message ids in the node's SQLite database, read directly (read-only): the API would
    make the node itself load every event's content, which is what a memory test measures."""
    uri = f"file:{node.data_dir / 'syncnode.db'}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as conn:
        rows = conn.execute("SELECT message_id FROM events WHERE channel = ?", (channel,))
        return {r[0] for r in rows}


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set (VmHWM) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc status")


T = TypeVar("T")


class Busy(Exception):
    """The node declined the session (it is syncing with us already): try again."""


async def _reconcile(stream: FramedStream, keys: list[bytes], channel: str) -> list[bytes]:
    session = ReconSession.initiator(MemoryKeyStore.from_sorted(sorted(keys)),
                                     [channel_bounds(1, channel)])
    missing: list[bytes] = []
    # A memory key store has every key at hand: its steps never ask for reads (ReadKeys).
    first = session.start()
    assert isinstance(first, bytes)
    await stream.send(bytes([RECON]) + first)
    while not session.done:
        frame = await stream.receive()
        if frame == bytes([BUSY]):
            raise Busy()
        reply = session.receive(frame[1:])
        assert not isinstance(reply, ReadKeys)
        missing += [k for e in session.events() if isinstance(e, MissingKeys) for k in e.keys]
        if reply is not None:
            await stream.send(bytes([RECON]) + reply)
    return missing


async def recon_and_withhold(host: P2PHost, peer: str, keys: list[bytes],
                             channel: str = "general") -> tuple[list[bytes], int]:
    """A whole Recon session advertising ``keys``: wants nothing, and answers every want list
    with an empty EVENTS_LAST. Returns the peer's keys we lack and how many keys it wanted."""
    wanted = 0

    async def withhold(want: list[bytes]) -> list[bytes]:
        nonlocal wanted
        wanted += len(want)
        return []

    return await recon_and_answer(host, peer, keys, withhold, channel), wanted


async def recon_and_answer(host: P2PHost, peer: str, keys: list[bytes],
                           answer: Callable[[list[bytes]], Awaitable[list[bytes]]],
                           channel: str = "general") -> list[bytes]:
    """A whole Recon session advertising ``keys`` and wanting nothing; each want list of the
    peer is answered with the event wires ``await answer(keys wanted)`` returns (taking as long
    as it takes). Returns the peer's keys we lack."""
    return await while_busy(lambda: _answer_once(host, peer, keys, answer, channel))


async def while_busy(attempt: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
    """``attempt()`` again while the node declines with BUSY (it is starting a session with us
    at the same moment), a little later each time; fails if it stays busy ``timeout`` s."""
    pause = 0.1
    with trio.move_on_after(timeout):
        while True:
            try:
                return await attempt()
            except Busy:
                await trio.sleep(pause)
                pause = min(pause * 2, 0.5)
    raise RuntimeError("the node stayed busy")


async def _answer_once(host: P2PHost, peer: str, keys: list[bytes],
                       answer: Callable[[list[bytes]], Awaitable[list[bytes]]],
                       channel: str) -> list[bytes]:
    async with await host.open_stream(peer, RECON_PROTOCOL) as stream:
        missing = await _reconcile(stream, keys, channel)
        await stream.send(pack_items(WANT_LAST, []))
        await stream.receive()  # its (empty) answer
        while True:
            frame = await stream.receive()
            want = unpack_items(frame[1:], max_items=1 << 20, max_item_bytes=1024)
            await stream.send(pack_items(EVENTS_LAST, await answer(want)))
            if frame[0] == WANT_LAST:
                break
    return missing


async def recon_and_serve(host: P2PHost, peer: str, wires: list[bytes],
                          channel: str = "general") -> int:
    """A whole Recon session advertising the events ``wires`` (valid or not) and answering
    every want list with them, until the node ends the session (it may stop asking once an
    answer fails its checks): returns how many the node asked for."""
    from sync.sds import decode_event
    from sync.stored_event import record_of_event

    by_key = {record_of_event(1, decode_event(w, verify_signature=False)).recon_key: w
              for w in wires}
    wanted: list[bytes] = []

    async def answer(keys: list[bytes]) -> list[bytes]:
        wanted.extend(keys)
        return [by_key[k] for k in keys if k in by_key]

    try:
        await recon_and_answer(host, peer, list(by_key), answer, channel)
    except P2PError:
        if not wanted:
            raise  # ended before asking for anything: not the node's verdict on an answer
    return len(wanted)


async def recon_first_message(host: P2PHost, peer: str, frame: bytes) -> bytes:
    """Open a Recon session with ``frame`` and return the node's reply (retried while the
    node declines with BUSY because it is starting a session with us at the same moment)."""
    async def once() -> bytes:
        async with await host.open_stream(peer, RECON_PROTOCOL) as stream:
            await stream.send(frame)
            reply = await stream.receive()
        if reply == bytes([BUSY]):
            raise Busy
        return reply

    return await while_busy(once)


async def want_and_stall(host: P2PHost, peer: str, seconds: float,
                         channel: str = "general") -> int:
    """Reconcile with nothing, WANT everything the peer has, and never read the answer."""
    return await while_busy(lambda: _want_once(host, peer, seconds, channel))


async def _want_once(host: P2PHost, peer: str, seconds: float, channel: str) -> int:
    async with await host.open_stream(peer, RECON_PROTOCOL) as stream:
        missing = await _reconcile(stream, [], channel)
        await stream.send(pack_items(WANT_LAST, missing[:1024]))
        await trio.sleep(seconds)
    return len(missing)


async def fetch_and_stall(host: P2PHost, peer: str, ids: list[str], requests: int,
                          seconds: float) -> int:
    """Open ``requests`` fetch streams asking for ``ids`` and read no more than the first
    frame of each answer; returns how many streams the node answered (the others were reset)."""
    accepted = 0
    async with trio.open_nursery() as nursery:
        async def one() -> None:
            nonlocal accepted
            try:
                async with await host.open_stream(peer, FETCH_PROTOCOL) as stream:
                    await stream.send("\n".join(ids).encode("ascii"))
                    await stream.receive()
                    accepted += 1
                    await trio.sleep(seconds)
            except Exception:  # refused or reset: the node defended itself
                return

        for _ in range(requests):
            nursery.start_soon(one)
    return accepted


async def amplify(target: str, ids: list[str], seconds: float) -> tuple[int, int]:
    """Attack 3 from one fresh peer: 8 fetch requests for ``ids`` and a Recon WANT for every
    key the node has, none of them read; returns (fetch streams served, keys wanted)."""
    served: list[int] = []
    async with hostile(target) as (host, peer), trio.open_nursery() as nursery:

        async def fetches() -> None:
            served.append(await fetch_and_stall(host, peer, ids, 8, seconds))

        nursery.start_soon(fetches)
        wanted = await want_and_stall(host, peer, seconds)
    return served[0], wanted


# What a hostile writer may put in one message: more than any node accepts (the item and key
# caps are left out where the code, e.g. b4adb7a's, has none).
_UNLIMITED = dataclasses.replace(ReconConfig().limits, **{
    name: value for name, value in
    {"max_message_bytes": 8 << 20, "max_items": 1 << 24, "max_keys": 1 << 24}.items()
    if name in {f.name for f in dataclasses.fields(Limits)}})


def key_list_bomb(channel: str = "general", count: int = 200_000) -> bytes:
    """A first Recon message listing ``count`` made-up keys for one range (~600 KB)."""
    lo, hi = channel_bounds(1, channel)
    keys = [lo + i.to_bytes(4, "big") for i in range(1, count + 1)]
    writer = MessageWriter(_UNLIMITED, ((lo, hi),))
    assert writer.try_keys(KEYS, lo, hi, keys) is not None
    return bytes([RECON]) + writer.finish(more=False)


def recon_flood_frame(channel: str = "general", items: int = 60_000,
                      seed: int = 0) -> bytes:
    """A first Recon message of ``items`` HASH claims over adjacent small ranges of one
    channel, each with a made-up count and fingerprint: every one mismatches, so a node
    without a work budget hashes, splits and lists all of them (1.3 MB at 60,000, within
    the default ``recon.max_message_ranges``, 262,144; 3.3 MB at 150,000)."""
    lo, hi = channel_bounds(1, channel)
    limits = ReconConfig().limits
    writer = MessageWriter(_UNLIMITED, ((lo, hi),))
    rng = random.Random(seed)
    bounds = [lo] + [lo + i.to_bytes(3, "big") for i in range(1, items)] + [hi]
    for a, b in itertools.pairwise(bounds):
        assert writer.try_hash(a, b, 1000, rng.randbytes(limits.fingerprint_bytes))
    return bytes([RECON]) + writer.finish(more=False)


async def recon_flood(target: str, frame: bytes, messages: int,
                      stop: trio.Event | None = None, timeout: float = 30.0,
                      on_sent: Callable[[], None] = lambda: None) -> int:
    """One fresh identity sending ``frame`` as the first message of ``messages`` Recon
    sessions back to back (or until ``stop``), each waiting for the node's first reply, its
    refusal or a reset; returns how many the node answered with a Recon reply."""
    answered = 0
    async with hostile(target) as (host, peer):
        for _ in range(messages):
            if stop is not None and stop.is_set():
                break
            with trio.move_on_after(timeout):
                try:
                    async with await host.open_stream(peer, RECON_PROTOCOL) as stream:
                        await stream.send(frame)
                        on_sent()
                        reply = await stream.receive()
                        answered += reply[:1] == bytes([RECON])
                except P2PError:  # refused, reset or banned: the next one at once
                    await trio.sleep(0.05)
            await trio.lowlevel.checkpoint()
    return answered
