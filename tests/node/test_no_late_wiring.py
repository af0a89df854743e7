"""Nothing in ``node/`` is wired after it was built (issue 41): no object has a callback or a
part set on it by another (``host.on_heard = ...``, ``relay.dcutr.punch_addrs = ...``,
``runtime.api_url = ...``). What an object needs is a constructor argument, built first; what
it learns later is a value its owner reads or an argument of a call; where two parts need each
other, a small object made before both is given to each (an evictions queue, ``ApiAddress``).

The scan: every assignment in ``node/`` to an attribute of anything but ``self`` / ``cls``
(``x.a = ...``, ``self.x.a = ...``, ``setattr(x, ...)``), except

* in ``node/p2p/compat/``, whose job is patching py-libp2p (methods and module names of the
  library replaced, state kept on its objects): allowed there only;
* augmented assignments (``stats.x += 1``): they update a count or sum the object holds, they
  never hand it a new part;
* the entries of ``ALLOWED``, each with its reason: fields of records and results being filled,
  and objects of other libraries configured the way those libraries are configured.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Patching py-libp2p is this package's job (docs/upstream.md).
COMPAT = "node/p2p/compat/"
OWN = {"self", "cls"}


@dataclass(frozen=True)
class Allowed:
    path: str
    targets: frozenset[str]
    reason: str


def _allow(path: str, targets: str, reason: str) -> Allowed:
    return Allowed(path, frozenset(targets.split()), reason)


ALLOWED = [
    _allow("node/api/app.py", "app.state.max_body_bytes app.state.body_timeout_s "
           "app.state.page_max_bytes app.state.max_follows app.state.follow_buffer_bytes "
           "app.state.follows",
           "Starlette's per-app State (its constructor takes none), filled with settings and a "
           "count on the app create_app just built"),
    _allow("node/api/app.py", "config.bind config.accesslog config.errorlog "
           "config.graceful_timeout config.keep_alive_timeout",
           "Hypercorn's Config is set by its attributes (its constructor takes none), on the "
           "one serve_api just built"),
    _allow("node/cli/node_commands.py", "args.interval",
           "argparse's parsed Namespace: a default filled in once the check that needs to know "
           "it was not given ran"),
    _allow("node/p2p/frames.py", "scope.shield", "trio's CancelScope: shielding a scope is "
           "setting its attribute (trio's API)"),
    _allow("node/store/commits.py", "scope.deadline", "trio's CancelScope: a deadline is moved "
           "by setting its attribute (trio's API)"),
    _allow("node/p2p/gossip.py", "setattr(stats)", "a P2PStats counter named by a variable, "
           "incremented"),
    _allow("node/p2p/setup.py", "router.max_iwant_requests_per_second "
           "router.max_ihave_messages_per_second",
           "py-libp2p's GossipSub takes no IHAVE/IWANT rate caps in its constructor: set on the "
           "router build_pubsub just built, before it runs"),
    _allow("node/replication/ingest.py", "slot.result slot.error worker.alive",
           "a request's result handed back in its slot (a future) and a worker's record of "
           "whether it runs: data"),
    _allow("node/replication/verify.py", "pending.result pending.error",
           "a batch's result handed back in its slot (a future)"),
    _allow("node/store/events.py", "pending.result pending.error",
           "a write's result handed back in its slot (a future)"),
    _allow("node/replication/membership.py", "entry.last_seen",
           "an address-book record (BookEntry): data"),
    _allow("node/replication/pings.py", "flight.counted_at", "a ping in flight's record: data"),
    _allow("node/replication/recon_session.py", "plan.fetched stats.more",
           "a session's plan and stats records, filled in as it runs: data"),
    _allow("node/snapshots/scheduler.py", "self._state.state self._state.reason "
           "self._state.started_at",
           "the scheduler's own state record (a dataclass it built)"),
    _allow("node/telemetry/memtrace.py", "sqlite_used.restype mallinfo2.restype",
           "ctypes: a foreign function's return type is declared by setting restype"),
    _allow("node/telemetry/metrics.py", "metric.samples family.help",
           "a metric family's samples and help text (records of prometheus_client and ours)"),
    _allow("node/ui/sessions.py", "state.tokens state.refilled",
           "a token bucket's record: data"),
]


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    """What ``node`` assigns to, tuples unpacked (``a.x, b.y = ...``)."""
    pending = list(node.targets) if isinstance(node, ast.Assign) else [node.target]
    found: list[ast.expr] = []
    while pending:
        target = pending.pop()
        if isinstance(target, ast.Tuple | ast.List):
            pending += target.elts
        elif isinstance(target, ast.Starred):
            pending.append(target.value)
        else:
            found.append(target)
    return found


def _set_on_others(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, target)`` of each attribute assignment to an object other than ``self``/``cls``:
    ``target`` as written, ``setattr(obj)`` for a ``setattr`` call."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            found += [(node.lineno, ast.unparse(t)) for t in _targets(node)
                      if isinstance(t, ast.Attribute)
                      and not (isinstance(t.value, ast.Name) and t.value.id in OWN)]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "setattr" and node.args
              and not (isinstance(node.args[0], ast.Name) and node.args[0].id in OWN)):
            found.append((node.lineno, f"setattr({ast.unparse(node.args[0])})"))
    return found


def late_wiring(root: Path) -> tuple[list[str], set[tuple[str, str]]]:
    """Every assignment the rule refuses under ``root``'s ``node/``, as ``path:line target``;
    and the ``ALLOWED`` entries that were used, as ``(path, target)``."""
    refused: list[str] = []
    used: set[tuple[str, str]] = set()
    for path in sorted((root / "node").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(COMPAT):
            continue
        for line, target in _set_on_others(ast.parse(path.read_text(encoding="utf-8"))):
            if any(a.path == rel and target in a.targets for a in ALLOWED):
                used.add((rel, target))
            else:
                refused.append(f"{rel}:{line} {target}")
    return refused, used


def test_nothing_in_node_is_wired_after_it_was_built() -> None:
    refused, _ = late_wiring(ROOT)
    assert refused == [], ("give the part to the constructor, or return it as a value the "
                           "owner reads (see this module's doc)")


def test_every_allowed_entry_is_still_needed() -> None:
    _, used = late_wiring(ROOT)
    stale = sorted(f"{a.path} {t}" for a in ALLOWED for t in a.targets if (a.path, t) not in used)
    assert stale == [], "drop these entries of ALLOWED: nothing assigns them any more"
    assert all(a.reason for a in ALLOWED)


def test_the_scan_sees_each_form_of_late_wiring() -> None:
    source = """
class A:
    def __init__(self, host):
        self.host = host                  # its own: fine
        host.on_heard = self.heard        # a callback set on another object
        self.host.guard.evict = self.drop # through one of its own parts
        a.b, c = 1, 2                     # unpacked
        setattr(host, "x", 1)             # by name
        setattr(self, "y", 2)             # its own: fine
        self.count += 1                   # fine
        host.stats.count += 1             # a count: fine
"""
    found = [target for _, target in _set_on_others(ast.parse(source))]
    assert sorted(found) == ["a.b", "host.on_heard", "self.host.guard.evict", "setattr(host)"]
