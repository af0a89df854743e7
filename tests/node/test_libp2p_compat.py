"""The py-libp2p compat package (``node.p2p.compat``): its table, one contract test per entry
that no other test file covers, per-host settings, and the rule that no private libp2p name is
used outside the package.

Each entry of ``node.p2p.compat.table.ENTRIES`` names the libp2p names it relies on and its
contract test; the tests here fail when a name disappears from the installed library, when a
named test is missing, when docs/upstream.md lacks the entry, or when a new private access
appears outside ``node/p2p/compat``. Real libp2p hosts where the behaviour needs them.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import logging
import os
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import libp2p.network.connection.swarm_connection as swarm_connection_module
import libp2p.stream_muxer.yamux.yamux as yamux_module
import pytest
import trio
import trio.testing
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.peer.peerstore import issue_and_cache_local_record
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11
from libp2p.pubsub.pb.rpc_pb2 import RPC
from libp2p.utils.varint import encode_uvarint
from multiaddr import Multiaddr

from node.clock import SystemClock
from node.p2p import FramedStream, P2PConfig, P2PHost, compat
from node.p2p.compat import yamux as compat_yamux
from node.p2p.compat.pubsub import GuardedPubsub
from node.p2p.compat.table import CHECKED_VERSION, ENTRIES, Entry
from node.p2p.run import open_host
from sync.reachability import ReachabilityConfig
from tests.harness.cluster import until

ROOT = Path(__file__).resolve().parents[2]
COMPAT = ROOT / "node" / "p2p" / "compat"
ECHO = "/test/compat-echo/1.0.0"

# -- the table ------------------------------------------------------------------------------


def _resolve(target: str) -> bool:
    """Whether ``module:Owner.attr`` (or ``module:name``) exists in the installed libp2p: as an
    attribute, or, for an instance attribute, assigned as ``self.attr`` in the owner's MRO."""
    module_name, _, dotted = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    *owners, attr = dotted.split(".")
    for name in owners:
        obj = getattr(obj, name)
    if hasattr(obj, attr):
        return True
    if not inspect.isclass(obj):
        return False
    for cls in obj.__mro__:
        with_source = inspect.getmodule(cls)
        if with_source is None or not with_source.__name__.startswith("libp2p"):
            continue
        if re.search(rf"self\.{re.escape(attr)}\s*(:[^=]*)?=", inspect.getsource(cls)):
            return True
    return False


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.key)
def test_every_libp2p_name_of_the_table_is_still_there(entry: Entry) -> None:
    assert entry.checked == CHECKED_VERSION == compat.SUPPORTED_LIBP2P_VERSION
    missing = [t for t in entry.targets if not _resolve(t)]
    assert not missing, f"{entry.key}: gone from the installed libp2p: {missing}"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.key)
def test_every_entry_has_its_contract_test_and_its_upstream_note(entry: Entry) -> None:
    path, _, function = entry.test.partition("::")
    source = (ROOT / path).read_text()
    assert re.search(rf"^(async )?def {function}\(", source, re.M), entry.test
    assert (COMPAT / f"{entry.module}.py").exists()
    upstream = (ROOT / "docs" / "upstream.md").read_text()
    section = re.search(rf"^## {entry.key}\b.*?(?=^## |\Z)", upstream, re.M | re.S)
    assert section, f"docs/upstream.md has no section for {entry.key}"
    for target in entry.targets:
        assert target.rsplit(".", 1)[-1].rsplit(":", 1)[-1] in section.group(0), target
    table = (COMPAT / "__init__.py").read_text()
    assert re.search(rf"^{entry.key}\s", table, re.M), f"{entry.key} not in compat's docstring"


def _run_fresh(script: str) -> None:
    """Run ``script`` in a fresh interpreter (nothing patched yet); it must exit 0."""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_apply_is_idempotent_and_checks_the_version_before_any_patch() -> None:
    compat.apply()
    compat.apply()
    assert compat.applied()
    # A fresh interpreter that sees another libp2p version: refused, nothing replaced.
    script = (
        "import importlib.metadata as m, libp2p.transport.tcp.tcp as t\n"
        "real = m.version\n"
        "m.version = lambda name: '0.9.0' if name == 'libp2p' else real(name)\n"
        "before = t._set_reuse_flags\n"
        "from node.p2p import compat\n"
        "from node.p2p.frames import P2PError\n"
        "try:\n"
        "    compat.apply()\n"
        "except P2PError as exc:\n"
        "    assert '0.8.1' in str(exc)\n"
        "else:\n"
        "    raise SystemExit('applied on 0.9.0')\n"
        "assert t._set_reuse_flags is before and not compat.applied()\n"
    )
    _run_fresh(script)


def test_a_benchmark_can_leave_out_only_the_measured_steps() -> None:
    """``$SYNCNODE_COMPAT_WITHOUT`` (benchmarks measuring one step alone): the steps named are
    not installed and the rest are; a defect fix cannot be left out."""
    with pytest.raises(ValueError, match="S1 cannot be left out"):
        compat.steps_left_out("W1, s1")
    assert compat.steps_left_out(" w1,B1 ,") == {"W1", "B1"}
    script = (
        "import os, logging\n"
        "os.environ['SYNCNODE_COMPAT_WITHOUT'] = 'B1,N1,K1,W1'\n"
        "import libp2p.pubsub.pubsub as p, libp2p.stream_muxer.yamux.yamux as y\n"
        "from libp2p.security.noise.io import NoiseTransportReadWriter as N\n"
        "reader, read_msg, lock = p.read_varint_prefixed_bytes_limited, N.read_msg, "
        "y.Yamux.__init__\n"
        "from node.p2p import compat\n"
        "from node.p2p.compat import yamux as ours\n"
        "compat.apply()\n"
        "assert p.read_varint_prefixed_bytes_limited is reader  # B1 left out\n"
        "assert N.read_msg is read_msg and y.Yamux.__init__ is lock  # N1, K1 left out\n"
        "assert y.Yamux._write_frame is ours._write_frame and not ours._coalesce  # Y2, not W1\n"
        "assert y.YamuxStream._auto_tune_and_send_window_update is not None\n"
    )
    _run_fresh(script)
    # And by default every step is installed.
    _run_fresh("from node.p2p import compat\nfrom node.p2p.compat import yamux as ours\n"
               "import libp2p.pubsub.pubsub as p\n"
               "compat.apply()\nassert ours._coalesce\n"
               "assert p.read_varint_prefixed_bytes_limited.__module__ == "
               "'node.p2p.compat.rpc_reads'\n")


# -- the rule: no private libp2p name outside node/p2p/compat -------------------------------

#: Private libp2p names the code outside compat used before the package existed: a practical
#: list (a static scan cannot tell a libp2p object from ours), extended with every private
#: attribute and method name the installed libp2p itself defines.
KNOWN_PRIVATE = frozenset({
    "_host", "_peer_record", "_conn", "_swarm", "_direct_connections", "_hole_punch_attempts",
    "_handle_hop_stream", "_read_stream_with_retry", "_relay_data", "_active_relays",
    "_close_stream", "_auto_drive_loop", "_try_unilateral_upgrade", "_have_direct_connection",
    "_verify_direct_connection", "_get_observed_addrs", "_set_reuse_flags",
    "_handle_new_peer", "_handle_dead_peer", "_is_msg_seen", "_write_frame",
})
#: Modules outside compat allowed a name of the list on an object of their own (``self``).
_SELF = {"self", "cls"}


def _libp2p_private_names() -> frozenset[str]:
    import libp2p

    names: set[str] = set()
    for path in Path(libp2p.__file__).parent.rglob("*.py"):
        try:
            tree = ast.parse(path.read_text())
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
    return frozenset(n for n in names if n.startswith("_") and not n.startswith("__"))


def private_uses(source: str, libp2p_private: frozenset[str]) -> list[str]:
    """The private libp2p uses of one module outside compat (the rule of docs/upstream.md)."""
    tree = ast.parse(source)
    from_libp2p: set[str] = set()  # local names bound by a libp2p import
    libp2p_bases: set[str] = set()  # classes of this module that subclass a libp2p class
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("libp2p"):
            for alias in node.names:
                from_libp2p.add(alias.asname or alias.name)
                if alias.name.startswith("_"):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("libp2p"):
                    from_libp2p.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name) and b.id in from_libp2p for b in node.bases):
            libp2p_bases.add(node.name)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                        item.name in libp2p_private):
                    found.append(f"{item.lineno}: {node.name} overrides {item.name}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                node.func.id in ("getattr", "hasattr", "setattr", "delattr")) and (
                len(node.args) > 1 and isinstance(node.args[1], ast.Constant)) and (
                node.args[1].value in KNOWN_PRIVATE | libp2p_private):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                node.func.id == "setattr") and node.args:
            root = node.args[0]
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in from_libp2p:
                found.append(f"{node.lineno}: setattr on libp2p's {ast.unparse(node.args[0])}")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and (
                not node.attr.startswith("__")):
            # On ``self``: our own attribute, unless the class is a libp2p subclass (below).
            on_self = isinstance(node.value, ast.Name) and node.value.id in _SELF
            if not on_self and (node.attr in KNOWN_PRIVATE or node.attr in libp2p_private):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    # ``self._x`` inside a libp2p subclass is libp2p's ``_x``, unless the class sets it itself
    # (an attribute of ours that happens to share a libp2p name) and it is not a known one.
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
                and n.name in libp2p_bases):
        selfs = [n for n in ast.walk(cls) if isinstance(n, ast.Attribute)
                 and isinstance(n.value, ast.Name) and n.value.id in _SELF]
        own = {n.attr for n in selfs if isinstance(n.ctx, ast.Store)} - KNOWN_PRIVATE
        for node in selfs:
            if node.attr in libp2p_private and node.attr not in own:
                found.append(f"{node.lineno}: {cls.name} uses {ast.unparse(node)}")
    return found


def test_the_scan_catches_each_kind_of_private_use() -> None:
    names = frozenset({"_handle_new_peer", "_direct_connections", "_set_reuse_flags"})
    source = (
        "import libp2p.transport.tcp.tcp as tcp\n"
        "from libp2p.pubsub.pubsub import Pubsub, _private_thing\n"
        "class P(Pubsub):\n"
        "    async def _handle_new_peer(self, p):\n"
        "        await super()._handle_new_peer(p)\n"
        "        self._direct_connections.clear()\n"
        "class Ours:\n"
        "    def __init__(self, h):\n"
        "        self._host = h\n"  # our own attribute: allowed
        "    def f(self, other):\n"
        "        return other._host\n"
        "setattr(tcp, '_set_reuse_flags', print)\n"
        "getattr(tcp, '_set_reuse_flags')\n"
    )
    found = private_uses(source, names)
    assert any("import _private_thing" in f for f in found)
    assert any("overrides _handle_new_peer" in f for f in found)
    assert any("super()._handle_new_peer" in f for f in found)
    assert any("uses self._direct_connections" in f for f in found)
    assert any("other._host" in f for f in found)
    assert any("setattr on libp2p's tcp" in f for f in found)
    assert any("getattr(tcp, '_set_reuse_flags')" in f for f in found)
    assert not any("self._host" in f for f in found)


#: Every package of code that runs: the daemon, its store, the Spark jobs, the scripts
#: (benchmarks included) and the harness that tests and benchmarks share. ``sync/`` imports no
#: libp2p at all (``tests/sync/test_sans_io.py``). The test modules themselves are exempt: a
#: contract test reads the private name it pins (the table's last column).
SCANNED = ("node", "storage", "spark_jobs", "scripts", "tests/harness")
#: Our own attributes that share a libp2p private name (a static scan cannot tell the object
#: apart), by module: each checked by hand.
OURS_NOT_LIBP2P = {
    # The Recon key store's cache of bucket reads (sync.recon.SummaryKeyStore), sized by the
    # benchmark.
    "scripts/bench/recon_bench.py": {"store._cache"},
}


def test_no_private_libp2p_name_is_used_outside_the_compat_package() -> None:
    libp2p_private = _libp2p_private_names()
    assert not KNOWN_PRIVATE - libp2p_private - {"_peer_record"}
    offenders: dict[str, list[str]] = {}
    scanned = 0
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if COMPAT in path.parents:
                continue
            scanned += 1
            name = str(path.relative_to(ROOT))
            allowed = OURS_NOT_LIBP2P.get(name, set())
            found = [f for f in private_uses(path.read_text(), libp2p_private)
                     if f.split(": ", 1)[1] not in allowed]
            if found:
                offenders[name] = found
    assert scanned > 200, scanned  # (the roots exist: a renamed package is not "clean")
    assert not offenders, (
        "private libp2p names outside node/p2p/compat (move them there, with a table entry, "
        f"or give P2PHost a public method): {offenders}")


# -- contract tests of the entries no other file covers --------------------------------------


def _bare_host(port: int) -> Any:
    return new_host(key_pair=create_new_key_pair(),
                    listen_addrs=[Multiaddr(f"/ip4/127.0.0.1/tcp/{port}")])


def test_r1_record_checked_once_per_receiving_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each receiving host verifies (and so stores in its own peerstore) a peer's record once:
    a record one host accepted is not taken as accepted by another host of the process."""
    import libp2p.pubsub.pubsub as pubsub_module
    import libp2p.pubsub.utils as utils_module

    compat.apply()
    opened: list[Any] = []
    original = utils_module.consume_envelope

    def counted(*args: Any, **kwargs: Any) -> Any:
        opened.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(utils_module, "consume_envelope", counted)
    consume = pubsub_module.maybe_consume_signed_record
    first, second, sender = _bare_host(4121), _bare_host(4122), _bare_host(4123)
    record = issue_and_cache_local_record(sender)
    rpc = RPC()
    rpc.senderRecord = record
    for receiver in (first, second):
        for _ in range(20):
            assert consume(rpc, receiver, sender.get_id())
    assert len(opened) == 2  # once per receiving host


async def _echo(stream: FramedStream) -> None:
    async for frame in stream:
        await stream.send(frame)


@asynccontextmanager
async def _echo_stream() -> AsyncIterator[tuple[P2PHost, P2PHost, FramedStream]]:
    """Two hosts, ``b`` echoing, and a stream from ``a`` to it that has carried a frame."""
    async with open_host(Ed25519PrivateKey.generate(), clock=SystemClock()) as a, \
            open_host(Ed25519PrivateKey.generate(), clock=SystemClock()) as b:
        b.set_stream_handler(ECHO, _echo)
        await a.connect(b.listen_addrs[0])
        async with await a.open_stream(b.peer_id, ECHO) as stream:
            await stream.send(b"warm")
            assert await stream.receive() == b"warm"
            yield a, b, stream


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_p1_a_malformed_rpc_costs_one_stream_not_the_host() -> None:
    """Bytes that are not an RPC protobuf on a pubsub stream: that stream is dropped and
    counted (per host), the host goes on (0.8.1 let ``DecodeError`` end its network service)."""
    async with open_host(Ed25519PrivateKey.generate(), clock=SystemClock()) as a, \
            open_host(Ed25519PrivateKey.generate(), clock=SystemClock()) as b:
        b.set_stream_handler(ECHO, _echo)
        await b.subscribe("compat")
        await a.connect(b.listen_addrs[0])
        pubsub = b._gossip._pubsub
        assert isinstance(pubsub, GuardedPubsub)
        raw = await a._streams.open_raw(b.peer_id, PROTOCOL_ID_V11)
        garbage = b"\x0a\xff\xff\xff\x0f"  # field 1, a length far past the end
        await raw.write(bytes([len(garbage)]) + garbage)
        await until(lambda: pubsub.bad_rpc_streams != 0, 30, "no bad RPC stream counted")
        stream = await a.open_stream(b.peer_id, ECHO)
        await stream.send(b"still up")
        assert await stream.receive() == b"still up"


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_p6_two_hosts_keep_their_own_peer_queue_size() -> None:
    """``gossip_peer_queue_size`` is per host: two hosts of one process with different sizes
    each build their peers' outbound queues with their own (0.8.1's is 32; the patch once
    kept the largest any host asked for, process-wide)."""
    sizes = {}
    async with open_host(Ed25519PrivateKey.generate(), P2PConfig(gossip_peer_queue_size=64),
                         clock=SystemClock()) as small, \
            open_host(Ed25519PrivateKey.generate(), P2PConfig(gossip_peer_queue_size=50_000),
                      clock=SystemClock()) as big, \
            open_host(Ed25519PrivateKey.generate(), clock=SystemClock()) as hub:
        await hub.subscribe("compat")
        for host in (small, big):
            await host.subscribe("compat")
            await host.connect(hub.listen_addrs[0])
        def both_sized() -> bool:
            for host in (small, big):
                queue = host._gossip._pubsub.peer_queues.get(ID.from_base58(hub.peer_id))
                if queue is not None:
                    sizes[host.peer_id] = queue._queue.max_size
            return len(sizes) == 2

        await until(both_sized, 30, "no queue to the hub")
        assert sizes == {small.peer_id: 64, big.peer_id: 50_000}


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_y2_frames_are_written_whole_without_debug_text(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With debug logging off no frame goes through 0.8.1's ``_write_frame`` (which builds a
    debug f-string per frame); with it on, every frame does, log line and all."""
    calls = [0]
    original = compat_yamux._original_write_frame

    async def counted(self: Any, data: bytes) -> None:
        calls[0] += 1
        assert original is not None
        await original(self, data)

    monkeypatch.setattr(compat_yamux, "_original_write_frame", counted)
    logger = logging.getLogger(yamux_module.logger.name)
    async with open_host(Ed25519PrivateKey.generate(), clock=SystemClock()) as a, \
            open_host(Ed25519PrivateKey.generate(), clock=SystemClock()) as b:
        b.set_stream_handler(ECHO, _echo)
        await a.connect(b.listen_addrs[0])
        stream = await a.open_stream(b.peer_id, ECHO)
        for _ in range(20):
            await stream.send(b"x" * 100)
            assert await stream.receive() == b"x" * 100
        assert calls[0] == 0
        monkeypatch.setattr(logger, "level", logging.DEBUG)
        monkeypatch.setattr(logger, "disabled", False)
        logger.manager._clear_cache()  # type: ignore[attr-defined]
        for _ in range(5):
            await stream.send(b"y" * 100)
            assert await stream.receive() == b"y" * 100
        assert calls[0] >= 5
    logger.manager._clear_cache()  # type: ignore[attr-defined]


def test_l1_libp2p_never_configures_the_root_logger() -> None:
    """0.8.1's swarm_connection logs on the root logger (``logging.debug``), which runs
    ``basicConfig`` when the root has no handler; through the shim it cannot."""
    compat.apply()
    script = (
        "import logging\n"
        "from node.p2p import compat\n"
        "compat.apply()\n"
        "import libp2p.network.connection.swarm_connection as m\n"
        "m.logging.debug('x'); m.logging.warning('y')\n"
        "assert logging.root.handlers == [], logging.root.handlers\n"
    )
    _run_fresh(script)
    assert swarm_connection_module.logging is not logging


def _reuseport(host: P2PHost) -> set[int]:
    listeners = host.libp2p_host.get_network().listeners.values()
    return {int(bool(sock.socket.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)))
            for listener in listeners for sock in listener.listeners}


async def _punch_source_port(host: P2PHost, target: P2PHost) -> int:
    """The local port of a hole-punch style dial (from ``host``'s listen port) to ``target``:
    the listen port when both sockets may share it, another one when libp2p fell back."""
    port = int(host.listen_addrs[0].split("/")[4])
    transport = host.libp2p_host.get_network().transport_manager.get_transports()[0]
    address = Multiaddr("/".join(target.listen_addrs[0].split("/")[:5]))
    raw = await transport.dial_with_source(address, ("127.0.0.1", port))
    try:
        return int(raw.stream.stream.socket.getsockname()[1])
    finally:
        await raw.close()


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_t2_two_hosts_keep_their_own_reuse_flags() -> None:
    """A host that punches holes shares its listen port (SO_REUSEPORT) and dials from it; one
    that does not, opened in the same process (even the same task), keeps its port to itself,
    in either order (the flags were once a process-wide function set by the last host built,
    so the first host's punches left from another port)."""
    plain, punching = P2PConfig(), P2PConfig(reachability=ReachabilityConfig(hole_punch=True))
    async with open_host(Ed25519PrivateKey.generate(), punching, clock=SystemClock()) as first, \
            open_host(Ed25519PrivateKey.generate(), punching, clock=SystemClock()) as other, \
            open_host(Ed25519PrivateKey.generate(), plain, clock=SystemClock()) as last:
        assert _reuseport(first) == _reuseport(other) == {1}
        assert _reuseport(last) == {0}
        first_port = int(first.listen_addrs[0].split("/")[4])
        last_port = int(last.listen_addrs[0].split("/")[4])
        assert await _punch_source_port(first, other) == first_port
        assert await _punch_source_port(last, other) != last_port
    async with open_host(Ed25519PrivateKey.generate(), plain, clock=SystemClock()) as alone:
        assert _reuseport(alone) == {0}


@pytest.mark.trio
@pytest.mark.timeout(30)
async def test_t3_a_closing_listener_has_no_addresses_rather_than_an_error() -> None:
    """``TCPListener.close`` closes its sockets before it forgets them; asked for its addresses
    in between (what identify does for a peer still connected while the host shuts down), the
    listener raised EBADF out of ``getsockname``, and that ended the host's nursery."""
    from libp2p.transport.tcp.tcp import TCP

    async def _ignore(stream: Any) -> None:
        await stream.aclose()

    compat.apply()
    listener = TCP().create_listener(_ignore)
    await listener.listen(Multiaddr("/ip4/127.0.0.1/tcp/0"))
    assert len(listener.get_addrs()) == 1
    seen: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.close)
        while listener.listeners or not seen:
            seen.append(len(listener.get_addrs()))  # raised EBADF without T3
            await trio.lowlevel.checkpoint()
    # The window was seen: a socket closed while the listener still listed it.
    assert 0 in seen and listener.listeners == []


def test_d1_d6_the_dcutr_names_we_drive_are_still_used_by_the_library() -> None:
    """D1: the service's ``run`` starts ``_auto_drive_loop`` (ours returns at once, so no
    punch starts by itself); D6: the attempt count we reset is the one the library counts
    and caps, and the "directly connected" cache we clear is the one it consults."""
    from libp2p.relay.circuit_v2.dcutr import DCUtRProtocol

    assert "self._auto_drive_loop" in inspect.getsource(DCUtRProtocol.run)
    source = inspect.getsource(DCUtRProtocol)
    assert "self._hole_punch_attempts[peer_id] = attempts + 1" in source
    assert "peer_id in self._direct_connections" in source
    assert "attempts >= MAX_HOLE_PUNCH_ATTEMPTS" in source


class _Calls:
    """Counts the calls of one libp2p method (wrapped, still run) while ``on``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str,
                 which: Any = None) -> None:
        self.count = 0
        self.on = False
        original = getattr(owner, name)

        def count(obj: Any) -> None:
            if self.on and (which is None or which(obj)):
                self.count += 1

        async def counted(obj: Any, *args: Any, **kwargs: Any) -> Any:
            count(obj)
            return await original(obj, *args, **kwargs)

        def counted_sync(obj: Any, *args: Any, **kwargs: Any) -> Any:
            count(obj)
            return original(obj, *args, **kwargs)

        monkeypatch.setattr(owner, name,
                            counted if inspect.iscoroutinefunction(original) else counted_sync)


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_n1_noise_messages_are_cut_from_buffered_socket_reads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Noise message costs at most one socket read (0.8.1: two exact reads each, its length
    then its body), and a burst of messages fewer; every frame still arrives whole."""
    from libp2p.io.trio import TrioTCPStream
    from libp2p.security.noise.io import NoiseTransportReadWriter

    reads = _Calls(monkeypatch, TrioTCPStream, "read")
    messages = _Calls(monkeypatch, NoiseTransportReadWriter, "decrypt")
    async with _echo_stream() as (_, _, stream):
        reads.on = messages.on = True
        payloads = [bytes([i]) * (100 + 37 * i) for i in range(100)]
        for payload in payloads:
            await stream.send(payload)
        for payload in payloads:
            assert await stream.receive() == payload
        reads.on = messages.on = False
    assert messages.count >= 100
    assert reads.count <= messages.count + 2, (reads.count, messages.count)


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_b1_pubsub_reads_rpcs_in_chunks_not_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pubsub reader takes each RPC from a per-stream buffer: one or two stream reads per
    RPC (0.8.1: one per byte of each varint length, then the body: three per 1.7 KB message),
    and every message is delivered whole."""
    from libp2p.network.stream.net_stream import NetStream

    reads = _Calls(monkeypatch, NetStream, "read",
                   which=lambda s: str(s.get_protocol()).startswith("/meshsub/"))
    async with open_host(Ed25519PrivateKey.generate(), clock=SystemClock()) as a, \
            open_host(Ed25519PrivateKey.generate(), clock=SystemClock()) as b:
        inbox = await b.subscribe("compat")
        await a.subscribe("compat")
        await a.connect(b.listen_addrs[0])
        await until(lambda: b.peer_id in a.mesh_peers("compat"), 30, "b not in a's mesh")
        reads.on = True
        payloads = [os.urandom(1_700) for _ in range(50)]
        for payload in payloads:
            await a.publish("compat", payload)
        with trio.fail_after(30):
            got = [(await inbox.receive()).data for _ in payloads]
        reads.on = False
    assert got == payloads
    # At most two reads per RPC (0.8.1's three fail it): one when the reader finds the whole
    # RPC buffered, two when it wakes between the writes of its length and its body, as a
    # loaded machine makes it do for every one (100 seen in a two-worker run).
    assert reads.count <= 2 * len(payloads), reads.count


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_b1_an_rpc_cut_anywhere_across_writes_is_read_whole() -> None:
    """RPCs whose varint and body arrive split across many writes (one byte of the length
    at a time) are read whole; a length above the limit ends that reader, not the host."""
    async with open_host(Ed25519PrivateKey.generate(), clock=SystemClock()) as a, \
            open_host(Ed25519PrivateKey.generate(), clock=SystemClock()) as b:
        await b.subscribe("compat")
        await a.connect(b.listen_addrs[0])
        pubsub = b._gossip._pubsub
        raw = await a._streams.open_raw(b.peer_id, PROTOCOL_ID_V11)
        rpcs = []
        for i in range(3):
            rpc = RPC()
            sub = rpc.subscriptions.add()
            sub.subscribe, sub.topicid = True, f"split-{i}-" + "t" * 200
            rpcs.append(rpc.SerializeToString())
        wire = b"".join(encode_uvarint(len(r)) + r for r in rpcs)
        for cut in (1, 2, 3, 150, 260, len(wire)):
            await raw.write(wire[:cut])
            wire = wire[cut:]
            # b has read this piece (and waits for more) before the next is written.
            await trio.testing.wait_all_tasks_blocked()
        a_id = ID.from_base58(a.peer_id)
        await until(lambda: all(a_id in pubsub.peer_topics.get(f"split-{i}-" + "t" * 200, ())
                                for i in range(3)), 30, "the split subscriptions were not read")
        assert pubsub.bad_rpc_streams == 0
        await raw.write(encode_uvarint(pubsub.max_inbound_rpc_size + 1) + b"x" * 100)
        b.set_stream_handler(ECHO, _echo)
        async with await a.open_stream(b.peer_id, ECHO) as stream:
            await stream.send(b"still up")
            assert await stream.receive() == b"still up"


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_w1_frames_written_together_share_one_socket_write(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames of many streams written at once on one connection go out in fewer socket writes
    than frames (0.8.1: one Noise message and one send per frame), each arriving whole."""
    from libp2p.io.trio import TrioTCPStream

    writes = _Calls(monkeypatch, TrioTCPStream, "write")
    received: list[bytes] = []

    async def collect(stream: FramedStream) -> None:
        async for frame in stream:
            received.append(frame)

    async with open_host(Ed25519PrivateKey.generate(), clock=SystemClock()) as a, \
            open_host(Ed25519PrivateKey.generate(), clock=SystemClock()) as b:
        b.set_stream_handler(ECHO, collect)
        await a.connect(b.listen_addrs[0])
        streams = [await a.open_stream(b.peer_id, ECHO) for _ in range(20)]
        for stream in streams:  # each stream's opening frames are out of the way
            await stream.send(b"")
        await until(lambda: len(received) >= len(streams), 30, "opening frames not received",
                    pause_max=0.01)
        sent: list[bytes] = []
        writes.on = True
        for round_ in range(5):
            async with trio.open_nursery() as nursery:
                for i, stream in enumerate(streams):
                    payload = f"{round_}:{i}:".encode() + b"x" * 500
                    sent.append(payload)
                    nursery.start_soon(stream.send, payload)
        writes.on = False
        await until(lambda: len(received) >= len(streams) + len(sent), 30,
                    "frames not received", pause_max=0.01)
        for stream in streams:
            await stream.close()
    assert sorted(received[len(streams):]) == sorted(sent)
    assert writes.count < len(sent), writes.count


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_k1_a_connections_free_locks_are_taken_without_a_yield() -> None:
    """The locks a message passes on its way (the connection's socket, write and stream locks,
    a stream's window lock) are taken without going back to the scheduler when free (0.8.1's
    ``trio.Lock`` yields even then), and queue in order when held."""
    async with _echo_stream() as (a, b, _):
        conn = a.libp2p_host.get_network().get_connections(ID.from_base58(b.peer_id))[0]
        muxed = conn.muxed_conn
        tcp = muxed.secured_conn.conn.read_writer.read_write_closer.stream
        yamux_stream = next(iter(muxed.streams.values()))
        locks = [muxed._write_lock, muxed.streams_lock, tcp.write_lock, tcp.read_lock,
                 yamux_stream.window_lock]
        ran: list[str] = []

        async def sibling() -> None:
            ran.append("sibling")

        for lock in locks[:3] + locks[4:]:  # the socket's read lock is held by its reader
            # A connection task (a ping, a window update) may hold it for a moment.
            await until(lambda lock=lock: not lock.locked(), 30, f"{lock} stayed held",
                        pause_max=0.01)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sibling)
                await lock.acquire()  # the sibling is runnable: a yield would run it
                ran.append("held")
                lock.release()
            assert ran == ["held", "sibling"], (lock, ran)
            ran.clear()

        lock = locks[0]
        order: list[int] = []

        async def waiter(i: int) -> None:
            async with lock:
                order.append(i)

        await lock.acquire()
        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(waiter, i)
                await trio.testing.wait_all_tasks_blocked()
            lock.release()
        assert order == [0, 1, 2]
