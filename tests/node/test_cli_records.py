"""``syncnode records verify|show`` on the real Hedera files, altered copies and our own files."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from node.cli.records_args import register
from sync.identity import peer_id_of
from sync.recordstream import RecordStreamWriter, SnapshotEvent, WriterConfig
from tests.conftest import ROOT

B5 = "2022-07-13T08_46_08.041986003Z"
B6 = "2022-07-13T08_46_11.304284003Z"


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="syncnode")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["records", *argv])
    code: int = args.func(args)
    return code


@pytest.fixture
def hedera(testdata: Path) -> Path:
    return testdata / "hedera-v6"


@pytest.fixture
def hedera_copy(hedera: Path, tmp_path: Path) -> Path:
    """A writable copy of hedera-v6 (the shared one is read-only)."""
    target = tmp_path / "hedera-v6"
    for source in hedera.rglob("*"):
        if source.is_file():
            dest = target / source.relative_to(hedera)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(source.read_bytes())
    return target


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x01
    path.write_bytes(bytes(data))


def test_verify_real_files_passes(hedera: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["verify", str(hedera), "--keys", str(hedera / "node-keys")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 12
    assert all(line.startswith("OK   ") for line in lines[:11])
    assert lines[-1] == "11 files, all checks passed, 1 checks skipped, 0 findings"
    assert any(
        f"record0.0.3/{B5}.rcd.gz" in line
        and "file=69a4354de5aeb12fbc989ae086fc291cfc1b61415391b4a4" in line
        and "running_hash=ok" in line
        for line in lines
    )


def test_verify_json(hedera: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["verify", str(hedera), "--keys", str(hedera / "node-keys"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    assert len(report["files"]) == 11
    sig = next(f for f in report["files"] if f["path"].endswith(f"record0.0.6/{B6}.rcd_sig"))
    checks = {c["name"]: c["status"] for c in sig["checks"]}
    assert checks["file_signature"] == checks["metadata_signature"] == "ok"


def test_verify_without_keys_does_not_claim_a_pass(
    hedera: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 29, bug 3: no key, no signature checked, yet "all checks passed" and exit 0.
    assert run(["verify", str(hedera)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert all("file_signature=ok" not in line for line in lines)
    sig_lines = [line for line in lines if " signature " in line]
    assert len(sig_lines) == 8 and all(line.startswith("SKIP") for line in sig_lines)
    assert "all checks passed" not in lines[-1]
    assert lines[-1] == ("11 files, NOT VERIFIED: 16 signatures unchecked (no public key for "
                         "node 0.0.3, 0.0.4, 0.0.5, 0.0.6: give --keys KEYDIR); no check "
                         "failed, 17 checks skipped, 0 findings")
    assert run(["verify", str(hedera), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True  # nothing failed...
    assert report["verified"] is False and report["signatures_unchecked"] == 16  # ...no pass
    assert run(["verify", str(hedera), "--keys", str(hedera / "node-keys"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verified"] is True and report["signatures_unchecked"] == 0


@pytest.mark.parametrize(
    ("relative", "position", "failed_check"),
    [
        (f"record0.0.3/{B5}.rcd.gz", 200, "decode: gzip corrupt"),
        (f"record0.0.3/sidecar/{B6}_01.rcd.gz", 100, "decode: gzip corrupt"),
        (f"record0.0.4/{B6}.rcd_sig", 500, "signature does not verify"),
    ],
)
def test_verify_altered_copy_fails(
    hedera_copy: Path,
    capsys: pytest.CaptureFixture[str],
    relative: str,
    position: int,
    failed_check: str,
) -> None:
    keys = str(hedera_copy / "node-keys")
    assert run(["verify", str(hedera_copy), "--keys", keys]) == 0
    capsys.readouterr()
    flip(hedera_copy / relative, position)
    assert run(["verify", str(hedera_copy), "--keys", keys]) == 1
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines()[:-1] if line.split()[2] == f"hedera-v6/{relative}"]
    assert line.startswith("FAIL") and failed_check in line
    # Other files fail only through this one (its signatures, its record's sidecar check).
    others = [o for o in out.splitlines()[:-1] if o.startswith("FAIL") and o != line]
    assert all("unreadable" in o or "sidecar_01" in o for o in others)
    assert "failed" in out.splitlines()[-1]


def test_module_entry_point_end_to_end(hedera: Path, hedera_copy: Path) -> None:
    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "node.cli.records", *argv],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

    good = cli("verify", str(hedera), "--keys", str(hedera / "node-keys"))
    assert good.returncode == 0, good.stderr
    flip(hedera_copy / f"record0.0.3/{B6}.rcd.gz", 300)
    bad = cli("verify", str(hedera_copy), "--keys", str(hedera_copy / "node-keys"))
    assert bad.returncode == 1
    assert f"FAIL record    hedera-v6/record0.0.3/{B6}.rcd.gz" in bad.stdout
    # The broken record file also leaves its signature files without a record to check.
    assert "record_file unreadable" not in bad.stderr and "Traceback" not in bad.stderr
    garbage = cli("show", str(hedera / "node-keys" / "0.0.3.pem"))
    assert garbage.returncode == 1
    assert garbage.stderr.startswith("error: ") and "gzip corrupt" in garbage.stderr
    assert "Traceback" not in garbage.stderr


def test_show_record_sidecar_and_signature(
    hedera: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["show", str(hedera / f"record0.0.3/{B6}.rcd.gz"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["block_number"] == 6
    assert info["file_hash"].startswith("ed518c8d05f470d4")
    assert [i["consensus_ns"] for i in info["items"]] == [
        1657701971304284003,
        1657701971304284004,
    ]
    (sidecar,) = info["sidecars"]
    assert sidecar["types"] == ["CONTRACT_STATE_CHANGE", "CONTRACT_BYTECODE"]
    assert [r["type"] for r in sidecar["records"]] == ["CONTRACT_STATE_CHANGE", "CONTRACT_BYTECODE"]

    assert run(["show", str(hedera / f"record0.0.3/{B6}.rcd.gz")]) == 0
    text = capsys.readouterr().out
    assert "block_number: 6" in text and "consensus: 2022-07-13T08:46:11.304284004Z" in text

    assert run(["show", str(hedera / f"record0.0.3/sidecar/{B6}_01.rcd.gz"), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["records"]) == 2

    assert run(["show", str(hedera / f"record0.0.5/{B5}.rcd_sig"), "--json"]) == 0
    sig = json.loads(capsys.readouterr().out)
    assert sig["file_signature"]["type"] == "SHA_384_WITH_RSA"
    assert sig["file_signature"]["signed_hash"].startswith("69a4354de5aeb12f")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "gzip truncated"),
        (b"\x1f\x8b\x08\x00garbage", "gzip"),
        (b"\x06\xff\xff", "protobuf invalid"),
    ],
)
def test_show_bad_files_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    name = f"{B5}.rcd_sig" if content.startswith(b"\x06") else f"{B5}.rcd.gz"
    path = tmp_path / name
    path.write_bytes(content)
    assert run(["show", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: ") and message in err


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["verify", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err
    bad_keys = tmp_path / "keys"
    bad_keys.mkdir()
    (bad_keys / "0.0.3.pem").write_bytes(
        b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"
    )
    assert run(["verify", str(tmp_path), "--keys", str(bad_keys)]) == 2
    assert "PEM key unreadable" in capsys.readouterr().err
    assert run(["show", str(tmp_path / "nope.rcd.gz")]) == 2


def test_empty_directory_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["verify", str(tmp_path)]) == 1
    assert "no record stream files" in capsys.readouterr().out


def _our_files(tmp_path: Path) -> tuple[Path, Path]:
    """Five events written as record files with sidecars (snapshot dir, public keys dir)."""
    key = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    writer = RecordStreamWriter(
        WriterConfig(node="n1", period_ns=10**9, delivery_sidecar=True), ed25519_key=key
    )
    out = []
    for i in range(5):
        event = SnapshotEvent(
            seq=i,
            message_id=f"{i:064x}",
            channel="c",
            sender=peer_id_of(key),
            lamport=1_700_000_000_000 + 700 * i,
            wire=b"w%d" % i,
            received_at_ms=1_700_000_000_000 + 700 * i + 3,
        )
        out += writer.add(event)
    out += writer.close()
    snapshot = tmp_path / "snapshot"
    for file in out:
        (snapshot / file.path).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / file.path).write_bytes(file.data)
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "n1.pem").write_bytes(
        key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    )
    return snapshot, keys


def test_our_files_verify_with_ed25519_key_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot, keys = _our_files(tmp_path)
    assert run(["verify", str(snapshot), "--keys", str(keys)]) == 0
    out_text = capsys.readouterr().out
    assert "file_signature=ok" in out_text and "sidecar_01=ok" in out_text
    # Node "n1" is not a peer id: without --keys its Ed25519 signatures are only skipped,
    # which is no pass.
    assert run(["verify", str(snapshot)]) == 1
    assert "file_signature=skip" in capsys.readouterr().out
    record = sorted(snapshot.rglob("*Z.rcd.gz"))[0]
    assert run(["show", str(record), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["items"][0]["event"]["message_id"] == f"{0:064x}"
    assert shown["sidecars"][0]["records"][0]["delivery"]["seq"] == 0


def _on_a_terminal(*args: str) -> str:
    """What ``syncnode records ARGS`` prints when stdout is a terminal (a pseudo-terminal)."""
    import os
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "node.cli", "records", *args], cwd=ROOT,
                            stdout=slave, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_hashes_are_abbreviated_on_a_terminal_only(tmp_path: Path) -> None:
    snapshot, keys = _our_files(tmp_path)
    args = ("verify", str(snapshot), "--keys", str(keys))
    piped = subprocess.run([sys.executable, "-m", "node.cli", "records", *args], cwd=ROOT,
                           capture_output=True, text=True, timeout=60).stdout
    assert max(map(len, piped.splitlines())) > 400  # full hashes for scripts
    lines = _on_a_terminal(*args).splitlines()
    assert len(lines) == len(piped.splitlines()) and lines[-1] == piped.splitlines()[-1]
    assert max(map(len, lines)) < 250, max(lines, key=len)
    assert "…" in lines[0] and "…" not in piped
    # The first 16 digits stand for each hash, as in the full output.
    cut = lines[0].split("file=")[1][:16]
    assert f"file={cut}" in piped.splitlines()[0]
    assert _on_a_terminal(*args, "--full") == piped
    record = sorted(snapshot.rglob("*Z.rcd.gz"))[0]
    shown = _on_a_terminal("show", str(record))
    assert "file_hash: " in shown and "…" in shown
    assert f"message_id: {0:064x}" in shown  # an id to look up stays whole
    assert "…" not in _on_a_terminal("show", str(record), "--full")
