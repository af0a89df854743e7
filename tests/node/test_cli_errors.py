"""A corpus of bad configs, manifests, files and arguments thrown at the real CLI.

Every case must end in exactly one ``error:`` line on stderr (no traceback) and the exit code of
the documented rule: 2 when the input is wrong (arguments, config, files, a request the node
calls malformed), 1 when a well-formed command could not be carried out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from node.config.fields import ConfigError
from node.node_main import startup_problem
from tests.conftest import ROOT

EXAMPLE = ROOT / "config.example.toml"
PEER = "12D3KooWNd8DXeVtTXwf8i8RpqKKr16e9W8eLnefWP4s6VvHaNLf"


def run_cli(*args: str, input: bytes | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args], cwd=ROOT, capture_output=True, input=input,
        timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def assert_one_error(result: subprocess.CompletedProcess[Any], code: int, fragment: str) -> str:
    raw = result.stderr
    stderr = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert result.returncode == code, (result.returncode, stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    assert fragment in lines[0], lines[0]
    return lines[0]


CONFIGS = [
    ("[sds]\nrepair_t_min_s = 200.0\nrepair_t_max_s = 120.0\n",
     "repair_t_min_s: must be < sds.repair_t_max_s"),
    # SDS-R may not flood before fetch-by-id has had its chance (docs/replication.md).
    ("[sds]\nrepair_t_min_s = 0.5\n", "repair_t_min_s: must be >= 1"),
    ('[storage]\nurl = "notaurl"\n', "storage.url: expected sqlite"),
    ('[p2p]\nlisten = ["garbage"]\n', "p2p.listen: not a multiaddr"),
    ('[p2p]\nlisten = ["/ip4/300.1.1.1/tcp/1"]\n', "bad ip4 address"),
    ('[p2p]\nlisten = ["/ip4/127.0.0.1/tcp/99999"]\n',
     "p2p.listen: tcp port '99999' in '/ip4/127.0.0.1/tcp/99999' is not a number in 0..65535"),
    ("[p2p]\nmax_frame_bytes = 1\n", "p2p.max_frame_bytes: must be >= 1 MiB, got 1"),
    ('[p2p]\nallowed_peers = ["junk"]\n', "p2p.allowed_peers: not a libp2p peer id"),
    ('[p2p]\nbootstrap = ["/ip4/127.0.0.1/tcp/1"]\n', "must end in /p2p/<peer id>"),
    (f'[p2p]\nbootstrap = ["/ip4/127.0.0.1/tcp/1/p2p/{PEER}x"]\n', "not a libp2p peer id"),
    ('[api]\nlisten = "foo:bar"\n', "api.listen: expected HOST:PORT"),
    # Issue 29, bug 5: values that used to be accepted.
    ("[recon]\nsession_timeout_s = inf\n",
     "recon.session_timeout_s: expected a finite number, got inf"),
    ("[sds]\nbloom_fp_rate = nan\n", "sds.bloom_fp_rate: expected a finite number, got nan"),
    ("[storage]\nbatch_max_events = 9223372036854775807\n",
     "storage.batch_max_events: must be <= 100000, got 9223372036854775807"),
    ("[api]\nmax_body_bytes = 1099511627776\n", "api.max_body_bytes: must be <= 1073741824"),
    ('[p2p]\nchannels = ["a/b"]\n', "p2p.channels: invalid channel name 'a/b': a channel name "
     "is 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit"),
    ('[p2p]\nchannels = ["general", "../x"]\n', "invalid channel name '../x'"),
    ('[db]\nchannel = "d b"\n', "db.channel: invalid channel name 'd b'"),
    ('[blocks]\nchannel = ".."\n', "blocks.channel: invalid channel name '..'"),
    ('[db.tables.users]\ncolumns = { a = "text" }\nwriters = ["me"]\n', "not a libp2p peer id"),
    ('[spark]\nmaster = "lokal"\n', "spark.master"),
    ("[node]\nnetwork_id = -1\n", "must be in [0, 2^63)"),
    ("[node]\nnetwork_id = 18446744073709551616\n", "must be in [0, 2^63)"),
    ("[node\n", "invalid TOML"),
    ("[node]\nbogus = 1\n", "node.bogus: unknown key"),
    # Each key in range, the combination not (node.config.combined).
    ("[sds]\nbloom_capacity = 1000000\n",
     "sds.delivered_window: must be >= sds.bloom_capacity"),
    ("[sds]\nmax_waiting = 10\nmax_waiting_per_sender = 20\n",
     "sds.max_waiting_per_sender: must be <= sds.max_waiting"),
    ("[sds]\ncausal_history_size = 100\n", "sds.causal_history_size: must be <= 16"),
    # Equal values too, with the same words (the rule is strict: SDS-R's T_req).
    ("[sds]\nrepair_t_min_s = 60.0\nrepair_t_max_s = 60.0\n",
     "sds.repair_t_min_s: must be < sds.repair_t_max_s"),
    ("[storage]\nbatch_max_evnts = 5\n",
     "storage.batch_max_evnts: unknown key; did you mean batch_max_events?"),
    ("[api]\nmax_body_bytes = 1e9\n",
     "api.max_body_bytes: expected an integer, got the float 1e+09: write 1000000000"),
    ("[recon]\nfanout = 1000\n", "recon.fanout: must be within 2..256"),
]


@pytest.mark.parametrize(("toml", "fragment"), CONFIGS)
def test_bad_config_is_one_line_exit_2(tmp_path: Path, toml: str, fragment: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    line = assert_one_error(run_cli("config", "validate", "--config", str(path)), 2, fragment)
    # One sentence for a person: no Python tuple or repr of what was read (issue 29).
    assert "(got (" not in line and "(got" not in line and "',)" not in line, line


def test_bad_config_stops_run_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(CONFIGS[0][0])
    assert_one_error(run_cli("run", "--config", str(path)), 2, "repair_t_min_s")
    # A data dir that is a file.
    afile = tmp_path / "file"
    afile.write_text("x")
    assert_one_error(run_cli("run", "--data-dir", str(afile), "--api", "127.0.0.1:0"), 2,
                     "node.data_dir")
    assert_one_error(run_cli("run", "--listen", "/ip4/1.2.3.4/udp/1"), 2, "p2p.listen")
    assert_one_error(run_cli("run", "--api", "foo:bar"), 2, "api.listen")
    # Keys that do not work together: refused before the node opens anything (it used to
    # start and fail inside its nursery: "unexpected ExceptionGroup ... a bug").
    data_dir = tmp_path / "never"
    assert_one_error(run_cli("run", "--data-dir", str(data_dir), "--api", "127.0.0.1:0",
                             "--listen", "/ip4/127.0.0.1/tcp/0",
                             env={"SYNCNODE_SDS_BLOOM_CAPACITY": "1000000"}), 2,
                     "sds.delivered_window: must be >= sds.bloom_capacity")
    assert not data_dir.exists()
    # Deeply nested JSON in the environment.
    deep = {"SYNCNODE_DB_TABLES": "[" * 50_000 + "]" * 50_000}  # (an env string is <128 KiB)
    assert_one_error(run_cli("config", "validate", env=deep), 2, "db.tables")


def test_a_config_error_inside_the_started_node_is_one_line() -> None:
    # In-process callers of node.daemon.serve meet the same check inside trio's groups.
    group = BaseExceptionGroup("nursery", [ExceptionGroup("inner", [
        ConfigError("sds.delivered_window", "must be >= sds.bloom_capacity")])])
    assert startup_problem(group) == \
        "config error: sds.delivered_window: must be >= sds.bloom_capacity"
    assert startup_problem(ExceptionGroup("x", [RuntimeError("bug")])) is None


def test_example_config_accepts_a_declared_table(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(EXAMPLE.read_text() + '\n[db.tables.users]\ncolumns = { name = "text", '
                                          'age = "integer" }\n')
    ok = run_cli("config", "validate", "--config", str(path))
    assert ok.returncode == 0, ok.stderr
    shown = run_cli("config", "show", "--config", str(path))
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout.decode()
    assert '[db.tables.users]\ncolumns = { name = "text", age = "integer" }' in text
    # A database password is not shown unless asked for.
    with_pg = tmp_path / "pg.toml"
    with_pg.write_text('[storage]\nurl = "postgresql+psycopg://u:s3cret@db:5432/x"\n')
    hidden = run_cli("config", "show", "--config", str(with_pg)).stdout.decode()
    assert 'url = "postgresql+psycopg://u:***@db:5432/x"' in hidden and "s3cret" not in hidden
    shown_pg = run_cli("config", "show", "--show-secrets", "--config", str(with_pg)).stdout
    assert b"s3cret" in shown_pg
    # What `config show` prints is a config that loads to the same values.
    again = tmp_path / "again.toml"
    again.write_text(text)
    assert run_cli("config", "show", "--config", str(again)).stdout.decode() == text


@pytest.mark.parametrize(("args", "code", "fragment"), [
    (("statu",), 2, "invalid choice"),
    (("status", "--api", "foo:bar"), 2, "--api 'foo:bar'"),
    (("status", "--api", "http://127.0.0.1:1/x"), 2, "no path"),
    (("status", "--api", "127.0.0.1:9"), 1, "no node answering"),
    (("log", "general", "--since", "yesterday", "--api", "127.0.0.1:9"), 2, "--since"),
    (("log", "general", "--limit", "0", "--api", "127.0.0.1:9"), 2, "--limit"),
    (("join", "garbage", "--api", "127.0.0.1:9"), 2, "not a multiaddr"),
    (("join", "/ip4/127.0.0.1/tcp/1/p2p/junk", "--api", "127.0.0.1:9"), 2, "not a libp2p"),
    (("peers", "forget", "junk", "--api", "127.0.0.1:9"), 2, "not a libp2p peer id"),
    (("db", "upsert"), 2, "the following arguments are required"),
    (("records", "verify", "/nonexistent/dir"), 2, "/nonexistent/dir"),
    (("completion", "fish"), 2, "invalid choice"),
    (("status", "--dat-dir", "a"), 2, "unrecognized arguments: --dat-dir a; did you mean "
                                      "--data-dir?"),
    (("db", "watch", "kv", "--sinse", "3"), 2, "did you mean --since?"),
    # A data dir that does not exist is said, not replaced by api.listen's 127.0.0.1:8700.
    (("status", "--data-dir", "/nonexistent/dd"), 1, "no data dir /nonexistent/dd (--data-dir)"),
    (("peers", "--data-dir", "/nonexistent/dd"), 1, "no node was ever started there"),
])
def test_bad_arguments(args: tuple[str, ...], code: int, fragment: str) -> None:
    assert_one_error(run_cli(*args), code, fragment)


def test_bad_files(tmp_path: Path) -> None:
    blocks = tmp_path / "blocks.jsonl"
    blocks.write_bytes(b"\xff\xfe not json\n")
    assert_one_error(run_cli("blocks", "publish", str(blocks), "--api", "127.0.0.1:9"), 2,
                     "blocks.jsonl")
    garbage = tmp_path / "2026-01-01T00_00_00.000000000Z.rcd"
    garbage.write_bytes(b"\x00\x01garbage")
    result = run_cli("records", "show", str(garbage))
    assert result.returncode in (1, 2)
    assert_one_error(result, result.returncode, str(garbage.name))


def _manifest(block: object) -> dict[str, object]:
    """Two file entries, the second with block ``block`` (today's TypeError was in the check
    that a block follows the previous one)."""
    entries = [{"path": f"r/{name}.rcd", "block": number, "period": 0, "count": 1,
                "first_consensus_ns": 0, "start_running_hash": "00", "end_running_hash": "00",
                "file_hash": "00", "signature": f"r/{name}.rcd_sig"}
               for name, number in (("a", 0), ("b", block))]
    return {"format": "syncnode-snapshot-1", "network_id": 1, "node": PEER, "period_ms": 60000,
            "chain": {}, "files": entries, "root": "", "count": 2, "ahash": "00"}


def test_loading_a_snapshot_without_a_trusted_signer_is_refused_before_anything(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = run_cli("bootstrap", "--from-snapshot", str(tmp_path), "--data-dir", str(data))
    assert_one_error(result, 2, "no trusted snapshot signer")
    result = run_cli("snapshot", "pull", str(tmp_path), "--data-dir", str(data),
                     "--signer", "nope")
    assert_one_error(result, 2, "--signer:")
    assert not data.exists()


@pytest.mark.parametrize("manifest", [
    "block-x", "nested", "not-json", "a-list", "no-manifest",
])
def test_bad_manifests_fail_bootstrap_and_leave_nothing_behind(
        tmp_path: Path, manifest: str) -> None:
    from sync.snapshot_manifest import FORMAT

    snap = tmp_path / "snap"
    snap.mkdir()
    content = {
        "block-x": json.dumps({**_manifest("x"), "format": FORMAT}),
        "nested": "[" * 200_000 + "]" * 200_000,
        "not-json": "{nope",
        "a-list": "[1, 2]",
    }.get(manifest)
    if content is not None:
        (snap / "manifest.json").write_text(content)
    data = tmp_path / "data"
    result = run_cli("bootstrap", "--from-snapshot", str(snap), "--data-dir", str(data),
                     "--signer", PEER)
    assert_one_error(result, 2, str(snap) if manifest != "block-x" else "block")
    assert not data.exists(), list(data.iterdir())
    # Into an existing, empty data dir: the manifest is refused before the dir is touched (no
    # lock, no database).
    data.mkdir()
    result = run_cli("bootstrap", "--from-snapshot", str(snap), "--data-dir", str(data),
                     "--signer", PEER)
    assert result.returncode == 2
    assert list(data.iterdir()) == []
