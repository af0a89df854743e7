"""Fixtures shared by every test package."""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# Property tests draw their examples from a seed fixed per test ("ci", the default): a run
# passes or fails as the one before it did, and a failure replays by running the test again.
# Each test sizes its own ``max_examples``. ``HYPOTHESIS_PROFILE=explore`` draws fresh examples
# each run (and keeps failing ones in .hypothesis/) to hunt for new counterexamples.
settings.register_profile("ci", derandomize=True, database=None, deadline=None,
                          print_blob=True)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parent.parent
TESTDATA = ROOT / "tests" / "testdata"

# Every JVM a test starts (Spark sessions, the jobs' drivers, a standalone master, worker and
# its executors, inherited through the environment) lives seconds on a few thousand events:
# the C2 compiler and the parallel collector's threads only burn the 2 cores there. C1 alone
# and the serial collector start and warm such a JVM faster (about 2 s of 11 per session
# measured); results do not depend on them. Benchmarks run outside the tests keep the JVM's
# defaults; ``SYNCNODE_TEST_JAVA_OPTIONS=""`` restores them in tests too.
TEST_JAVA_OPTIONS = os.environ.get("SYNCNODE_TEST_JAVA_OPTIONS",
                                   "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
if TEST_JAVA_OPTIONS:
    os.environ["JDK_JAVA_OPTIONS"] = " ".join(
        filter(None, (os.environ.get("JDK_JAVA_OPTIONS", ""), TEST_JAVA_OPTIONS)))


@pytest.fixture(scope="session")
def testdata() -> Path:
    """``tests/testdata`` (sources and licences in its README); a missing file fails."""
    if not (TESTDATA / "vectors.md").is_file():
        pytest.fail(f"conformance data missing: {TESTDATA / 'vectors.md'}")
    return TESTDATA


# ``make test`` runs the suite on pytest-xdist workers (``--dist loadgroup``). Tests of one group
# run on one worker, one after another; every other test file goes, whole, to whichever worker
# is free (its module-scoped fixtures, a node or a cluster, are then set up once). Two kinds of
# tests must not overlap:
# - those on the one PostgreSQL database of ``SYNCNODE_TEST_PG`` (each resets it; the
#   ``sqlite`` case of a test run on both backends does not) and the Spark jobs (one local
#   session per worker, a JVM each; the Spark benchmark's cluster): group "shared-db";
# - the network namespaces, the benchmark smokes that start node processes and every ``slow``
#   test that starts node processes (timing-sensitive on 2 cores): group "processes", so at
#   most one of them runs at a time, beside at most one lighter test.
# A ``slow`` test whose nodes all run in the test's process, a file's tests that are not
# ``slow`` and a smoke that computes in its own process are not held back behind that group.
# xdist 3.8 groups by an ``xdist_group`` mark, through a node id attribute pytest 9 no longer
# reads, so the scheduler below groups by the test's source (a benchmark smoke by the script it
# runs and the helper modules that script imports).
SHARED_DB_DIRS = ("storage",)
SPARK_DIRS = ("spark_jobs",)
SHARED_DB_WORDS = ("SYNCNODE_TEST_PG", "PG_URL", "tests.pg", "db_helpers")
SPARK_WORDS = ("spark_jobs",)
PROCESS_DIRS = ("net",)
# What a benchmark script (or a helper it imports) uses when it runs node processes or
# network namespaces.
PROCESS_WORDS = ("NodeProcess", "netns", "node.cli", "start_all", "InProcessNode")
# What a test (or a function of its module it calls) names when it starts node processes: the
# harness's process starters (tests/harness/cluster.py, burst.py), and the CLI's module named
# in a command line of its own (``-m node.cli run ...``); ``cluster(...)`` without
# ``in_process=True`` is one too. (A CLI command sent to a node, ``node.cli("status")``, is a
# short client process, not a node.)
TEST_PROCESS_WORDS = ("NodeProcess", "netns", "start_node", "fast_node", "on_defaults",
                      "start_three", "killed_mid_burst", "burst_and_kill", '"node.cli"')
BENCH_SCRIPTS = ROOT / "scripts" / "bench"


def xdist_group(path: Path, source: str, test: str = "", param: str = "") -> str | None:
    """The group of test ``test`` (a function name; empty: any test of the file), of
    parameters ``param``, of the file at ``path`` whose text is ``source``; ``None``: any
    worker, side by side with anything."""
    directory = path.relative_to(ROOT / "tests").parts[0]
    if directory in SPARK_DIRS or (
            (directory in SHARED_DB_DIRS or any(word in source for word in SHARED_DB_WORDS))
            and not on_sqlite_only(param)):
        return "shared-db"
    if directory in PROCESS_DIRS or (marked_slow(source, test)
                                     and starts_processes(source, test)):
        return "processes"
    return None


def on_sqlite_only(param: str) -> bool:
    """Whether a test of those parameters runs on SQLite (its own file) and not on the shared
    PostgreSQL database: the ``sqlite`` case of a test parametrized over both backends."""
    return "sqlite" in param and "postgres" not in param


def bench_group(script: Path) -> str | None:
    """The group of the smoke run of the benchmark ``script``."""
    text = _bench_text(script)
    if any(word in text for word in (*SHARED_DB_WORDS, *SPARK_WORDS)):
        return "shared-db"
    if any(word in text for word in PROCESS_WORDS):
        return "processes"
    return None


def marked_slow(source: str, test: str) -> bool:
    """Whether test function ``test`` of a module whose text is ``source`` carries the
    ``slow`` mark (its own, its class's or the module's ``pytestmark``); with ``test`` empty,
    whether any test of the module does."""
    if "mark.slow" not in source:
        return False
    slow = _slow_tests(source)
    return slow is None or not test or test in slow


@functools.cache
def _slow_tests(source: str) -> frozenset[str] | None:
    """The names of the slow-marked test functions of a module; ``None``: all of them (a
    module-level ``pytestmark``, or a source the parser cannot read)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    slow: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            if _names_slow(node.value):
                return None
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if any(_names_slow(d) for d in node.decorator_list):
                slow.add(node.name)
        elif isinstance(node, ast.ClassDef):
            class_slow = any(_names_slow(d) for d in node.decorator_list) or any(
                isinstance(n, ast.Assign) and _names_slow(n.value) for n in node.body)
            slow.update(n.name for n in node.body
                        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                        and (class_slow or any(_names_slow(d) for d in n.decorator_list)))
    return frozenset(slow)


def starts_processes(source: str, test: str) -> bool:
    """Whether test function ``test`` (empty: any test) of a module whose text is ``source``
    starts node processes: its code, or that of the module's functions and fixtures it names
    (and so on), names a process starter."""
    return _starts_processes(source, test)


@functools.cache
def _starts_processes(source: str, test: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return True
    defs: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defs[node.name] = node
            if isinstance(node, ast.ClassDef):
                defs.update((n.name, n) for n in node.body
                            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
    if not test or test not in defs:
        return any(word in source for word in TEST_PROCESS_WORDS) or _calls_cluster(tree)
    todo, seen = [test], {test}
    while todo:
        called = defs[todo.pop()]
        code = ast.get_source_segment(source, called) or ""
        if any(word in code for word in TEST_PROCESS_WORDS) or _calls_cluster(called):
            return True
        for name in {n.id for n in ast.walk(called) if isinstance(n, ast.Name)} | {
                a.arg for n in ast.walk(called) if isinstance(n, ast.arguments)
                for a in n.args}:
            if name in defs and name not in seen:
                seen.add(name)
                todo.append(name)
    return False


def _calls_cluster(tree: ast.AST) -> bool:
    """A ``cluster(...)`` call that does not ask for ``in_process=True`` (processes)."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
               and n.func.id == "cluster"
               and not any(k.arg == "in_process" and isinstance(k.value, ast.Constant)
                           and k.value.value is True for k in n.keywords)
               for n in ast.walk(tree))


def _names_slow(expr: ast.expr) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "slow" for n in ast.walk(expr))


@functools.cache
def _source(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def _bench_text(script: Path) -> str:
    """A benchmark script's text with that of the ``scripts/bench`` modules it imports."""
    text = _source(script)
    imported = re.findall(r"^(?:from|import) (\w+)", text, re.MULTILINE)
    return text + "".join(_source(BENCH_SCRIPTS / f"{name}.py") for name in imported)


def group_of(nodeid: str) -> str | None:
    """The group of a test by its node id (``tests/x/test_y.py::test_z[param]``)."""
    file, _, rest = nodeid.partition("::")
    path = ROOT / file
    test = rest.rpartition("::")[2].partition("[")[0]
    param = nodeid.rpartition("[")[2].rstrip("]") if nodeid.endswith("]") else ""
    script = BENCH_SCRIPTS / f"{param}.py"
    if path.parent.name == "bench" and param.endswith("_bench") and script.is_file():
        return bench_group(script)  # a smoke: what its script runs decides
    return xdist_group(path, _source(path), test, param)


def work_unit(nodeid: str) -> str:
    """What xdist hands a worker at once: a test's group, else its whole file."""
    return group_of(nodeid) or nodeid.partition("::")[0]


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class FileGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return FileGroupScheduling(config, log)
