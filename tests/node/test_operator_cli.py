"""What a newcomer meets on the command line (issue 29), against real node processes and the
real CLI: the database on a default config, the client's token variable, the token in usage
errors, finding a node from its data dir, human output, and the errors for flags and ids that
do nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.datadir.api_token import TOKEN_ENV
from tests.conftest import ROOT
from tests.harness.ports import reusable_port
from tests.harness.procs import NodeProcess

SECRET = "s3cret-token-value-XYZ"
# node.datadir.api_address.API_URL_FILE, spelled out to run on old code too
API_URL_FILE = "api_url"


def syncnode(*args: str, env: dict[str, str] | None = None,
             cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """The CLI exactly as typed: no --api unless the test gives one, no token variable
    unless the test sets one."""
    base = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args], cwd=cwd, capture_output=True, text=True,
        timeout=120, env={**base, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def at(node: NodeProcess) -> tuple[str, ...]:
    """--api as well as --data-dir: these tests show their point on the old code too, where
    --data-dir alone did not find the node."""
    return ("--api", node.api_url, "--data-dir", str(node.data_dir))


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A node on the default config (its API on a port the CLI cannot guess)."""
    node = NodeProcess(tmp_path_factory.mktemp("plain") / "n1",
                       env={"SYNCNODE_SPARK_ENABLED": "false"}).start()
    try:
        yield node
    finally:
        node.kill()


def test_db_declare_on_a_default_config_is_a_clear_error(plain: NodeProcess) -> None:
    # Bug 1: HTTP 500 "internal error" (UnknownChannel: 'db' in the node's log).
    result = syncnode("db", "declare", "users", "name=text", *at(plain))
    assert result.returncode == 1, result.stderr
    (line,) = result.stderr.splitlines()
    assert "HTTP 409" in line and "the replicated database is off on this node" in line
    assert "db.enabled = true" in line and "500" not in line
    written = syncnode("db", "upsert", "users", "u1", "name=x", *at(plain))
    assert written.returncode == 1 and "replicated database is off" in written.stderr
    assert "UnknownChannel" not in plain.log_tail(200)
    # A disabled application answers alike, whichever it is: 409 naming the key to set.
    for command in (("blocks", "head"), ("db", "watch", "users")):
        off = syncnode(*command, *at(plain))
        assert off.returncode == 1, off.stderr
        assert "HTTP 409" in off.stderr and ".enabled = true" in off.stderr, off.stderr


def test_db_enabled_declare_write_and_delete_of_unknown_ids(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "db", env={"SYNCNODE_DB_ENABLED": "true",
                                             "SYNCNODE_SPARK_ENABLED": "false"}).start()
    try:
        where = at(node)
        declared = syncnode("db", "declare", "users", "name=text", *where)
        assert declared.returncode == 0, declared.stderr
        assert "schema of users declared, applied" in declared.stdout
        assert syncnode("db", "upsert", "users", "u1", "name=Ana", *where).returncode == 0
        # An id never written: an error (404), not a silent tombstone.
        missing = syncnode("db", "delete", "users", "nobody", *where)
        assert missing.returncode == 1
        assert "HTTP 404" in missing.stderr and "no row 'nobody' in users" in missing.stderr
        assert "nothing to delete" in missing.stderr
        # The hint names this command's flag, not the API's body field.
        assert "--pending deletes it anyway" in missing.stderr
        assert '"pending"' not in missing.stderr
        parked = syncnode("db", "update", "users", "nobody", "name=x", *where)
        assert parked.returncode == 1 and "HTTP 404" in parked.stderr
        assert "--pending queues the update" in parked.stderr
        assert '"pending"' not in parked.stderr
        assert syncnode("db", "delete", "users", "u1", *where).returncode == 0
        # Deleting it again is fine (its tombstone is known), and --pending deletes a record
        # still to come from a peer.
        assert syncnode("db", "delete", "users", "u1", *where).returncode == 0
        pending = syncnode("db", "delete", "users", "later", "--pending", *where)
        assert pending.returncode == 0, pending.stderr
    finally:
        node.terminate()


def test_the_client_token_variable_is_not_a_config_key(plain: NodeProcess,
                                                        tmp_path: Path) -> None:
    # Bug 2: "config error: api.token: unknown key" from run, snapshot pull and config show.
    env = {TOKEN_ENV: plain.token}
    shown = syncnode("config", "show", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "token" not in shown.stdout
    pulled = syncnode("snapshot", "pull", str(tmp_path / "no-snapshot"), "--data-dir",
                      str(tmp_path / "stopped"), env=env)
    assert "unknown key" not in pulled.stderr and "config error" not in pulled.stderr
    other = NodeProcess(tmp_path / "other", env={**env, "SYNCNODE_SPARK_ENABLED": "false"})
    other.start()  # raises (with the node's log) if `run` stops
    try:
        # The variable is the client's token: the other node's is not this one.
        refused = syncnode("status", "--api", other.api_url, env=env)
        assert refused.returncode == 1 and "HTTP 401" in refused.stderr
        assert syncnode("status", *at(plain), env=env).returncode == 0
    finally:
        other.terminate()


@pytest.mark.parametrize("args", [
    ("config", "show", "--token", SECRET),
    ("config", "show", f"--token={SECRET}"),
    ("config", "validate", "--tok", SECRET),
    ("completion", "bash", "--token", SECRET),
    ("records", "show", "x.rcd.gz", "--token", SECRET),
])
def test_usage_errors_never_echo_the_token(args: tuple[str, ...]) -> None:
    # Bug 4: "error: unrecognized arguments: --token s3cret..." in a terminal or a log.
    result = syncnode(*args, env={TOKEN_ENV: SECRET})
    assert result.returncode == 2
    assert SECRET not in result.stderr and SECRET not in result.stdout
    assert "unrecognized arguments" in result.stderr and "***" in result.stderr


def test_a_client_finds_its_node_from_the_data_dir_alone(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "n1", env={"SYNCNODE_SPARK_ENABLED": "false"}).start()
    data_dir = str(node.data_dir)
    try:
        url_file = node.data_dir / API_URL_FILE
        assert url_file.read_text().strip() == node.api_url
        # Its port is not 8700, and no --api is given: the data dir says where it is.
        assert not node.api_url.endswith(":8700")
        found = syncnode("id", "--data-dir", data_dir)
        assert found.returncode == 0, found.stderr
        assert found.stdout.splitlines()[0] == node.peer_id
        # ... also through a config that names the data dir.
        config = tmp_path / "c.toml"
        config.write_text(f'[node]\ndata_dir = "{data_dir}"\n')
        assert syncnode("status", "--config", str(config)).returncode == 0
        # --api still overrides.
        elsewhere = syncnode("status", "--data-dir", data_dir, "--api", "127.0.0.1:9")
        assert elsewhere.returncode == 1
        assert "no node answering at http://127.0.0.1:9 " in elsewhere.stderr
        assert "address from --api" in elsewhere.stderr
    finally:
        assert node.terminate() == 0
    # A clean stop takes the address away again: the error then says where it looked.
    assert not (node.data_dir / API_URL_FILE).exists()
    gone = syncnode("status", "--data-dir", data_dir)
    assert gone.returncode == 1 and "address from api.listen" in gone.stderr


def test_an_api_url_left_by_a_killed_node_is_not_followed(tmp_path: Path) -> None:
    """kill -9 leaves <data dir>/api_url behind: a client must not take it for a running node
    (another process may serve that address by then), and a restarted node drops it before it
    answers."""
    # Its API port is taken again by the second node once it is dead: one the kernel gives
    # no other socket meanwhile (tests.harness.ports).
    node = NodeProcess(tmp_path / "a", "--api", f"127.0.0.1:{reusable_port()}",
                       env={"SYNCNODE_SPARK_ENABLED": "false"}).start()
    other: NodeProcess | None = None
    data_dir = str(node.data_dir)
    try:
        old_url = node.api_url
        node.kill()  # SIGKILL: no clean stop
        assert (node.data_dir / API_URL_FILE).read_text().strip() == old_url
        # Someone else now answers at that address.
        other = NodeProcess(tmp_path / "b", "--api", old_url.removeprefix("http://"),
                            env={"SYNCNODE_SPARK_ENABLED": "false"}).start()
        asked = syncnode("status", "--data-dir", data_dir, env={TOKEN_ENV: other.token})
        assert asked.returncode == 1, asked.stdout
        assert f"no node runs on {data_dir}: its api_url is left from a node that did not " \
               "stop cleanly" in asked.stderr, asked.stderr
        other.terminate()
        other = None
        # Restarted (on another port): the file names the new address once it answers.
        node.extra_args = []  # --api 127.0.0.1:0
        node.start()
        assert node.api_url != old_url
        found = syncnode("id", "--data-dir", data_dir)
        assert found.returncode == 0, found.stderr
        assert found.stdout.splitlines()[0] == node.peer_id
    finally:
        if other is not None:
            other.kill()
        node.kill()


def test_status_count_without_watch_is_an_error(plain: NodeProcess) -> None:
    where = at(plain)
    for flag in (("--count", "3"), ("--interval", "1")):
        result = syncnode("status", *flag, *where)
        assert result.returncode == 2
        assert result.stderr.strip() == f"error: {flag[0]} needs --watch (status --watch " \
                                        f"{flag[0]} ...)"
    watched = syncnode("status", "--watch", "--count", "1", "--interval", "0.2", *where)
    assert watched.returncode == 0, watched.stderr


ISO = r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d"


def test_human_output_with_json_unchanged(plain: NodeProcess) -> None:
    where = at(plain)
    assert syncnode("publish", "general", "hello", *where).returncode == 0
    text = syncnode("status", *where).stdout
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in text.splitlines())
    assert re.fullmatch(rf"\d+(\.\d)? (s|min \d\d s) \(since {ISO}Z\)", rows["uptime"]), text
    assert re.fullmatch(r"sqlite:///\S+ \(\d+(\.\d)? (B|KiB|MiB)\)", rows["database"]), text
    assert rows["snapshots"] == "none"  # spark disabled on this node
    raw = json.loads(syncnode("status", "--json", *where).stdout)
    assert isinstance(raw["uptime_s"], float) and raw["database_bytes"] > 0
    assert raw["snapshot_bytes"] is None
    line = syncnode("log", "general", *where).stdout.splitlines()[-1]
    assert re.match(rf"{ISO}\.\d{{3}}Z  \S{{8}}  [0-9a-f]{{12}}  hello$", line), line
    event = json.loads(syncnode("log", "general", "--json", *where).stdout.splitlines()[-1])
    assert isinstance(event["lamport"], int)
