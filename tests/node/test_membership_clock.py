"""Membership, liveness and bans on trio's MockClock: the p2p host and the membership driver read
one injected clock (node/clock.py), so minutes of their timers pass in a second or two of real
time. Real in-process libp2p hosts on loopback and a real SQLite store; only the clock is mock.

Before the clock was injected, membership's ping rounds, liveness and housekeeping compared
``time.monotonic()`` instants, and bans expired on it: under MockClock real time barely moved,
so a dead peer was never closed within the test, a ban never ended, and the address book was
saved with the real date, not the clock's.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p.abc import INetStream
from libp2p.host.ping import ID as PING_PROTOCOL_ID
from libp2p.host.ping import handle_ping
from sqlalchemy import select
from sqlalchemy.engine import Engine
from trio.testing import MockClock

from node.clock import TrioWallClock
from node.config.membership import MembershipSection
from node.p2p import DialError, P2PConfig, P2PHost
from node.p2p.run import open_host
from node.p2p.scoring import PeerScoring
from node.p2p.standing import PeerStanding
from node.replication.membership import Membership, membership_liveness
from node.store.events import EventStore
from node.telemetry.metrics import Metrics
from storage import make_engine, upgrade
from storage.schema import node_state
from sync.peerscore import ScoreConfig
from sync.reachability import ReachabilityConfig
from tests.harness.clocks import let_pass
from tests.harness.cluster import until

T0 = 1_700_000_000.0  # the wall clock's reading when the mock clock is at 0
AUTOJUMP_S = 0.002  # real seconds every task must wait before the mock clock jumps


def _key(n: int) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(bytes([n]) * 32)


def _engine(tmp_path: Path, name: str = "node") -> Engine:
    engine = make_engine(f"sqlite:///{tmp_path / f'{name}.db'}")
    upgrade(engine)
    return engine


class _Node:
    """What a node builds before its host, as the daemon does: its liveness state (the host
    tells it who proved alive) and its peers' scores."""

    def __init__(self, section: MembershipSection, metrics: Metrics, clock: TrioWallClock,
                 scores: ScoreConfig | None = None) -> None:
        self.liveness = membership_liveness(section)
        self.scoring = PeerScoring(metrics, scores or ScoreConfig(), clock)


@asynccontextmanager
async def _hosts(clock: TrioWallClock, count: int, config: P2PConfig | None = None, *,
                 nodes: Sequence[_Node | None] = ()) -> AsyncIterator[list[P2PHost]]:
    """``count`` hosts, the i-th opened with ``nodes[i]``'s parts (if any)."""
    config = config or P2PConfig(dial_timeout=5.0)
    async with AsyncExitStack() as stack:
        hosts = []
        for i in range(count):
            node = nodes[i] if i < len(nodes) else None
            hosts.append(await stack.enter_async_context(open_host(
                _key(60 + i), config, clock=clock,
                heard=node.liveness.heard if node else None,
                scoring=node.scoring if node else None)))
        yield hosts


def _membership(host: P2PHost, engine: Engine, metrics: Metrics, section: MembershipSection,
                clock: TrioWallClock, node: _Node) -> Membership:
    """The driver on a real store, nobody in a Recon session; ``host`` was opened with
    ``node``."""
    return Membership(host, EventStore(engine), metrics, section,
                      in_session=lambda _peer: False, liveness=node.liveness, clock=clock)


async def _until(done: Callable[[], bool], within_s: float) -> float:
    """Wait (virtual seconds) until ``done()``; returns the clock's time then."""
    await until(done, within_s, "not done")
    return trio.current_time()


def _run(main: Callable[[], object]) -> float:
    """``main`` on a MockClock; returns the real seconds it took (printed, never asserted)."""
    started = time.monotonic()
    trio.run(main, clock=MockClock(autojump_threshold=AUTOJUMP_S))  # type: ignore[arg-type]
    return time.monotonic() - started


async def _never_answer(stream: INetStream) -> None:
    """A ping handler that reads and never echoes: the peer's process is alive, its pings die
    (what a peer behind a dead path looks like to us)."""
    while await stream.read(32):
        pass


def test_liveness_closes_a_silent_peer_after_virtual_minutes(tmp_path: Path) -> None:
    """Two virtual minutes of answered pings leave the connection alone; once the peer stops
    answering, ``ping_failures_close`` failed pings close it and count
    ``membership_liveness_closed_total``: about a virtual minute, in a second or two."""
    section = MembershipSection(ping_interval_s=20.0, ping_timeout_s=10.0, ping_failures_close=3,
                                px=False, idle_timeout_s=3600.0)
    metrics = Metrics()
    engine = _engine(tmp_path)
    marks: dict[str, float] = {}

    async def main() -> None:
        clock = TrioWallClock(T0)
        node = _Node(section, metrics, clock)
        async with _hosts(clock, 2, nodes=[node]) as (a, b), trio.open_nursery() as nursery:
            membership = _membership(a, engine, metrics, section, clock, node)
            await a.connect(b.listen_addrs[0])
            nursery.start_soon(membership.run)
            await let_pass(120.0)
            marks["healthy"] = float(b.peer_id in a.connected_peers())
            marks["closed_while_healthy"] = metrics.value("membership_liveness_closed_total")
            b.libp2p_host.set_stream_handler(PING_PROTOCOL_ID, _never_answer)
            marks["silenced"] = trio.current_time()
            marks["closed"] = await _until(lambda: b.peer_id not in a.connected_peers(), 600.0)
            nursery.cancel_scope.cancel()

    real_s = _run(main)
    print(f"{marks['closed'] - marks['silenced']:.0f} virtual s to close, {real_s:.1f} s real")
    assert marks["healthy"] == 1.0 and marks["closed_while_healthy"] == 0
    took = marks["closed"] - marks["silenced"]
    # Three failed pings, one sent each ping_interval_s: at least two intervals after the
    # silence, within three intervals plus the last ping's timeout (and a housekeeping beat).
    assert 2 * section.ping_interval_s <= took <= 4 * section.ping_interval_s, took
    assert metrics.value("membership_liveness_closed_total") == 1
    assert metrics.value("membership_outages_total") == 0  # a LAN peer died, not our uplink


def test_an_outage_is_noticed_probed_and_ended_on_virtual_time(tmp_path: Path) -> None:
    """Our only remote peer is reached through a relay (a remote path, as across the
    internet). Its pings stop answering and the relay stops relaying: liveness closes the
    connection, and since no remote peer answered meanwhile an outage begins. For a virtual
    minute every probe dial fails (through a relay that refuses circuits), none of them held
    against the peer; when the relay relays again the next probe gets through, and the outage
    ends and is counted. The relay is a LAN peer: its answered pings never end the outage."""
    section = MembershipSection(ping_interval_s=10.0, ping_timeout_s=5.0, ping_failures_close=3,
                                px=False, idle_timeout_s=3600.0)
    config = P2PConfig(dial_timeout=5.0, reachability=ReachabilityConfig())
    metrics = Metrics()
    engine = _engine(tmp_path)
    seen: dict[str, float] = {}

    async def main() -> None:
        clock = TrioWallClock(T0)
        node = _Node(section, metrics, clock)
        async with _hosts(clock, 3, config, nodes=[None, node]) as (relay, a, b), \
                trio.open_nursery() as nursery:
            assert relay.relay is not None and b.relay is not None
            for host in (a, b):
                await host.connect(relay.listen_addrs[0])
            relay.relay.set_serving(True)
            assert await b.relay.reserve(relay.peer_id, 10)
            [address] = b.relay.relayed_addrs()
            membership = _membership(a, engine, metrics, section, clock, node)
            nursery.start_soon(membership.run)
            await let_pass(1.0)
            assert await a.connect(address) == b.peer_id and a.path(b.peer_id) == "relayed"
            membership.learn(b.peer_id, address)  # as join does
            await let_pass(30.0)  # answered remote pings
            seen["remote_ok"] = float(membership.liveness.last_remote_ok is not None)
            b.libp2p_host.set_stream_handler(PING_PROTOCOL_ID, _never_answer)
            relay.relay.set_serving(False)
            seen["cut"] = trio.current_time()
            seen["began"] = await _until(lambda: membership.liveness.in_outage, 120.0)
            seen["closed"] = metrics.value("membership_liveness_closed_total")
            await let_pass(60.0)
            seen["still_out"] = float(membership.liveness.in_outage)
            seen["probe_dials_failed"] = metrics.value("membership_dials_total", kind="dial",
                                                       result="failed")
            seen["failures_held"] = membership.book.entries[b.peer_id].failures
            b.libp2p_host.set_stream_handler(PING_PROTOCOL_ID, handle_ping)
            relay.relay.set_serving(True)
            seen["healed"] = trio.current_time()
            seen["ended"] = await _until(lambda: not membership.liveness.in_outage, 60.0)
            seen["back"] = float(b.peer_id in a.connected_peers())
            nursery.cancel_scope.cancel()

    real_s = _run(main)
    print(f"outage {seen['ended'] - seen['began']:.0f} virtual s, {real_s:.1f} s real")
    assert seen["remote_ok"] == 1.0
    # Three unanswered pings 10 s apart (the first up to 10 s after the cut), the last timing
    # out 5 s later: the connection closed, and the outage began, 25-40 s after the cut.
    assert 20.0 <= seen["began"] - seen["cut"] <= 45.0, seen["began"] - seen["cut"]
    assert seen["closed"] == 1
    assert seen["still_out"] == 1.0 and seen["probe_dials_failed"] >= 10
    assert seen["failures_held"] == 0  # our outage, not the peer's fault
    assert seen["ended"] - seen["healed"] <= 5.0  # the first probe after the heal
    assert seen["back"] == 1.0
    assert metrics.value("membership_outages_total") == 1


def _saved_at(engine: Engine) -> float:
    """When the address book was last saved (Unix seconds, as the store recorded it)."""
    with engine.connect() as conn:
        saved_ms = conn.execute(select(node_state.c.updated_at).where(
            node_state.c.key == "membership/address_book")).scalar_one()
    return float(saved_ms) / 1000


@pytest.mark.parametrize(("low_watermark", "rounds"), [
    (1, (8, 14)),  # one connection is enough: every 22.5-37.5 s
    (8, (47, 80)),  # the default: one connection is thin, every sixth (3.75-6.25 s)
])
def test_peer_exchange_and_book_saves_run_on_virtual_time(
        tmp_path: Path, low_watermark: int, rounds: tuple[int, int]) -> None:
    """Five virtual minutes of membership: peer exchange asks a connected peer every
    ``px_interval_s`` (jittered by a quarter either way; a sixth of it while fewer than
    ``low_watermark`` peers are connected) and the address book is saved every
    ``address_book_save_interval_s``, stamped with the clock's wall time."""
    section = MembershipSection(px_interval_s=30.0, address_book_save_interval_s=30.0,
                                idle_timeout_s=3600.0, low_watermark=low_watermark)
    metrics, other_metrics = Metrics(), Metrics()
    engine, other_engine = _engine(tmp_path), _engine(tmp_path, "b")
    ends: dict[str, float] = {}

    async def main() -> None:
        clock = TrioWallClock(T0)
        nodes = [_Node(section, metrics, clock), _Node(section, other_metrics, clock)]
        async with _hosts(clock, 2, nodes=nodes) as (a, b), trio.open_nursery() as nursery:
            ours = _membership(a, engine, metrics, section, clock, nodes[0])
            theirs = _membership(b, other_engine, other_metrics, section, clock, nodes[1])
            nursery.start_soon(ours.run)
            nursery.start_soon(theirs.run)
            await let_pass(1.0)  # both listening to their host's peer events
            await a.connect(b.listen_addrs[0])
            await let_pass(149.0)
            ends["saved_by_150"] = await trio.to_thread.run_sync(_saved_at, engine)
            await let_pass(150.0)
            ends["connected"] = float(b.peer_id in a.connected_peers())
            ends["wall"] = clock.wall()
            nursery.cancel_scope.cancel()

    real_s = _run(main)
    asked = metrics.value("px_exchanges_total", role="asked", result="ok")
    print(f"asked {asked:.0f} times in 300 virtual s, {real_s:.1f} s real")
    assert ends["connected"] == 1.0
    # One ask when we dialled, then the rounds in 300 s.
    assert 1 + rounds[0] <= asked <= 1 + rounds[1], asked
    assert other_metrics.value("px_exchanges_total", role="served", result="ok") >= asked
    assert metrics.value("px_records_total", outcome="added") + \
        metrics.value("px_records_total", outcome="updated") >= 1  # b's own record
    # Every 30 virtual s (housekeeping every 2): the last save before 150 s was after 118 s.
    assert T0 + 118 <= ends["saved_by_150"] <= T0 + 150, ends["saved_by_150"] - T0
    # And once more when the driver stopped, at the clock's wall time then (a save stamped by
    # the system's wall clock would read today's date, far from T0).
    assert ends["wall"] - 1 <= _saved_at(engine) <= ends["wall"] + 1


def test_a_ban_ends_on_virtual_time(tmp_path: Path) -> None:
    """``PeerStanding`` bans a misbehaving peer for ``ban_s`` of the host's clock: it is
    disconnected and refused for the whole virtual ten minutes, and let in after them."""
    config = ScoreConfig(ban_threshold=-50.0, ban_s=600.0, max_ban_s=3600.0)
    metrics = Metrics()
    seen: dict[str, object] = {}

    async def main() -> None:
        clock = TrioWallClock(T0)
        node = _Node(MembershipSection(), metrics, clock, config)
        async with _hosts(clock, 2, nodes=[node]) as (host, bad):
            standing = PeerStanding(host)
            await bad.connect(host.listen_addrs[0])
            assert not standing.penalise(bad.peer_id, "protocol")  # -30: not yet
            assert standing.penalise(bad.peer_id, "protocol")  # -60: banned
            banned_at = trio.current_time()
            gone = await _until(lambda: bad.peer_id not in host.connected_peers(), 30.0)
            seen["disconnected"] = bad.peer_id not in host.connected_peers()
            await let_pass(banned_at + 590.0 - gone)
            try:
                await bad.connect(host.listen_addrs[0])
                seen["refused_at_590"] = False
            except DialError:
                seen["refused_at_590"] = True
            seen["banned_at_590"] = host.is_banned(bad.peer_id)
            await let_pass(banned_at + 601.0 - trio.current_time())
            seen["banned_at_601"] = host.is_banned(bad.peer_id)
            await bad.connect(host.listen_addrs[0])
            await _until(lambda: bad.peer_id in host.connected_peers(), 10.0)
            seen["back"] = bad.peer_id in host.connected_peers()

    real_s = _run(main)
    print(f"ban of 600 virtual s in {real_s:.1f} s real")
    assert seen == {"disconnected": True, "refused_at_590": True, "banned_at_590": True,
                    "banned_at_601": False, "back": True}
    assert metrics.value("peer_bans_total") == 1


def test_the_host_clock_is_the_one_membership_reads(tmp_path: Path) -> None:
    """One clock object from the host to the drivers: membership, its peer exchange and
    activity, and the connection manager's host all read the one they are given (so their
    instants compare)."""
    section, engine = MembershipSection(), _engine(tmp_path)

    async def main() -> None:
        clock = TrioWallClock(T0)
        node = _Node(section, Metrics(), clock)
        async with _hosts(clock, 1, nodes=[node]) as (host,):
            membership = _membership(host, engine, Metrics(), section, clock, node)
            assert membership.clock is host.clock is host.guard.clock is host.bans.clock \
                is clock
            assert membership.px.clock is clock and membership.activity.clock is clock
            await let_pass(5.0)

    _run(main)
