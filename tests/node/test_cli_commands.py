"""The client commands against one real node: what they import, proxies, id, publish from stdin,
log --limit/--since, completion scripts, status --watch."""

from __future__ import annotations

import base64
import json
import os
import pty
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.harness.inproc import InProcessNode

# What a client command must never load: the node runtime and everything heavy behind it.
FORBIDDEN = ("sqlalchemy", "trio", "libp2p", "node.runtime", "node.daemon", "node.store.events",
             "httpx", "starlette", "hypercorn", "cryptography", "google.protobuf", "pyspark",
             "prometheus_client", "node.telemetry.metrics")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessNode]:
    # In this process: the commands under test are the client processes.
    started = InProcessNode(tmp_path_factory.mktemp("cmd") / "n").start()
    try:
        yield started
    finally:
        started.terminate()


def cli(node: InProcessNode, *args: str, input: bytes | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """The CLI as the README shows it: --api plus --data-dir (for the token)."""
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args, "--api", node.api_url,
         "--data-dir", str(node.data_dir)],
        cwd=ROOT, capture_output=True, input=input, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def imported_modules(*args: str) -> set[str]:
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "node.cli", *args],
                            cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-2000:]
    return {m[1].strip() for m in re.finditer(r"^import time:.*\|.*\|( *[\w.]+)$",
                                              result.stderr, re.M)}


def test_client_commands_import_only_what_they_need(node: InProcessNode, tmp_path: Path) -> None:
    api = ["--api", node.api_url, "--data-dir", str(node.data_dir)]
    for args in (["--version"], ["--help"], ["status", *api], ["publish", "general", "x", *api],
                 ["log", "general", "--limit", "1", *api], ["snapshot", "status", *api]):
        modules = imported_modules(*args)
        assert "node.cli.common" in modules  # (node.cli runs as __main__)
        heavy = sorted(m for m in modules if m.split(".")[0] in FORBIDDEN or m in FORBIDDEN)
        assert not heavy, (args, heavy)


def test_proxies_are_ignored_for_the_local_api(node: InProcessNode) -> None:
    dead = "http://127.0.0.1:9"
    env = {"HTTP_PROXY": dead, "http_proxy": dead, "HTTPS_PROXY": dead, "ALL_PROXY": dead,
           "NO_PROXY": ""}
    result = cli(node, "status", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["peer_id"] == node.peer_id


def test_id_online_and_offline(node: InProcessNode) -> None:
    online = cli(node, "id")
    assert online.returncode == 0, online.stderr
    lines = online.stdout.decode().split()
    assert lines[0] == node.peer_id and lines[1:] == node.listen_addrs
    offline = subprocess.run(
        [sys.executable, "-m", "node.cli", "id", "--offline", "--data-dir", str(node.data_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert offline.returncode == 0, offline.stderr
    assert offline.stdout.strip() == node.peer_id


def test_publish_from_stdin_and_log_limit_since(node: InProcessNode) -> None:
    channel = "general"
    before = len(cli(node, "log", channel).stdout.splitlines())
    texts = [b"one\n", b"two\n\n", b"\x00\xffbinary\x80\n"]
    ids = []
    for data in texts:
        out = cli(node, "publish", channel, "-", input=data)
        assert out.returncode == 0, out.stderr
        ids.append(out.stdout.decode().strip())
    events = [json.loads(x) for x in cli(node, "log", channel, "--json").stdout.splitlines()]
    by_id = {e["message_id"]: e for e in events}
    # One trailing newline stripped (documented), no more.
    assert by_id[ids[0]]["content"] == "one"
    assert by_id[ids[1]]["content"] == "two\n"
    # Bytes that are not UTF-8 are stored as they are.
    assert by_id[ids[2]]["content"] is None
    assert base64.b64decode(by_id[ids[2]]["content_b64"]) == b"\x00\xffbinary\x80"
    assert len(events) == before + 3
    last_two = cli(node, "log", channel, "--json", "--limit", "2").stdout.splitlines()
    assert [json.loads(x)["message_id"] for x in last_two] == \
        [e["message_id"] for e in events[-2:]]
    newest = max(e["lamport"] for e in events)
    assert cli(node, "log", channel, "--since", str(newest + 1)).stdout == b""
    since = cli(node, "log", channel, "--json", "--since", str(newest)).stdout.splitlines()
    assert {json.loads(x)["lamport"] for x in since} == {newest}
    assert len(cli(node, "log", channel, "--since", "1h").stdout.splitlines()) == len(events)


def test_completion_scripts_complete_commands() -> None:
    script = subprocess.run([sys.executable, "-m", "node.cli", "completion", "bash"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout

    def complete(*words: str) -> list[str]:
        quoted = " ".join(f"'{w}'" for w in words)
        probe = (f"{script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _syncnode; "
                 'printf "%s\\n" "${COMPREPLY[@]}"')
        return subprocess.run(["bash", "-c", probe], capture_output=True, text=True,
                              timeout=30).stdout.split()

    assert complete("syncnode", "sn") == ["snapshot"]
    assert complete("syncnode", "snapshot", "p") == ["pull"]
    assert complete("syncnode", "peers", "f") == ["forget"]
    assert "--limit" in complete("syncnode", "log", "general", "--l")
    zsh = subprocess.run([sys.executable, "-m", "node.cli", "completion", "zsh"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert zsh.startswith("#compdef syncnode\n") and "bashcompinit" in zsh


def _publish_some(node: InProcessNode, count: int) -> None:
    for i in range(count):
        assert cli(node, "publish", "general", f"watch {i}").returncode == 0


def test_status_watch_shows_rates_without_and_with_a_tty(node: InProcessNode) -> None:
    args = [sys.executable, "-m", "node.cli", "status", "--watch", "--interval", "1.5",
            "--count", "2", "--api", node.api_url, "--data-dir", str(node.data_dir)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    watch = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
    _publish_some(node, 5)
    out, err = watch.communicate(timeout=60)
    assert watch.returncode == 0, err
    lines = out.splitlines()
    # No TTY: one plain line per refresh, no escape codes.
    assert len(lines) == 2 and "\x1b" not in out, out
    assert all("in/s=" in x and "out/s=" in x and "recon/s=" in x and "peers=" in x
               and "lag=" in x and re.search(r" sync=\w+ behind=\d+$", x) for x in lines)
    assert sum(float(re.search(r"out/s=([\d.]+)", x)[1]) for x in lines) > 0  # type: ignore[index]
    # On a terminal the screen is redrawn in place.
    leader, follower = pty.openpty()
    tty = subprocess.Popen(args, cwd=ROOT, stdout=follower, stderr=subprocess.PIPE, env=env)
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + 60
    while tty.poll() is None and time.monotonic() < deadline:
        try:
            chunks.append(os.read(leader, 65536))
        except OSError:
            break
    tty.wait(timeout=30)
    os.close(leader)
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert tty.returncode == 0
    assert screen.count("\x1b[H") == 2 and "events in" in screen and "recon sessions" in screen
    assert "sync " in screen
