"""``records verify`` reads what the Hedera mirror node reads: upgrade-era files with a negative
block number (re-signed here with a test key), directories without sidecar files and files
named as in HIP-435's own example (``<instant>.gz``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from sync.recordstream import (
    decode_record_file,
    encode_record_file,
    encode_signature_file,
    file_hash,
    gzip_deterministic,
    metadata_hash,
    sign_hash,
)
from sync.recordstream import record_stream_pb2 as pb
from tests.node.test_cli_records import B5, B6, run

UPGRADE_BLOCK = -9223372036854775797
NODES = ("0.0.3", "0.0.4", "0.0.5", "0.0.6")


@pytest.fixture(scope="module")
def test_key() -> RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=3072)


@pytest.fixture
def tree(testdata: Path, tmp_path: Path) -> Path:
    """A writable copy of the real hedera-v6 files (the shared ones are read-only)."""
    target = tmp_path / "hedera-v6"
    shutil.copytree(testdata / "hedera-v6", target)
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def set_block_numbers(tree: Path, numbers: dict[str, int], key: RSAPrivateKey) -> Path:
    """Rewrite record0.0.3's files with these block numbers, re-sign both files for every node
    with ``key`` and write a key directory naming it for every node."""
    for stem in (B5, B6):
        path = tree / "record0.0.3" / f"{stem}.rcd.gz"
        message = pb.RecordStreamFile()
        message.CopyFrom(decode_record_file(path.read_bytes(), path.name).message)
        number = numbers.get(stem, message.block_number)
        message.block_number = number
        raw = encode_record_file(message)
        path.write_bytes(gzip_deterministic(raw))
        meta = metadata_hash(
            message.hapi_proto_version,
            message.start_object_running_hash.hash,
            message.end_object_running_hash.hash,
            number,
        )
        sig = pb.SignatureFile(
            file_signature=sign_hash(key, file_hash(raw)),
            metadata_signature=sign_hash(key, meta),
        )
        for node in NODES:
            (tree / f"record{node}" / f"{stem}.rcd_sig").write_bytes(encode_signature_file(sig))
    keys = tree.parent / "test-keys"
    keys.mkdir(exist_ok=True)
    pem = key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    for node in NODES:
        (keys / f"{node}.pem").write_bytes(pem)
    return keys


def real_block_number(tree: Path, stem: str) -> int:
    path = tree / "record0.0.3" / f"{stem}.rcd.gz"
    return decode_record_file(path.read_bytes(), path.name).message.block_number


def test_negative_block_number_is_a_finding_with_hashes_chain_and_rsa_verified(
    tree: Path, test_key: RSAPrivateKey, capsys: pytest.CaptureFixture[str]
) -> None:
    before = real_block_number(tree, B5)
    keys = set_block_numbers(tree, {B6: UPGRADE_BLOCK}, test_key)
    assert run(["verify", str(tree), "--keys", str(keys), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    record = next(f for f in report["files"] if f["path"] == f"hedera-v6/record0.0.3/{B6}.rcd.gz")
    checks = {c["name"]: c["status"] for c in record["checks"]}
    assert checks == {
        "decode": "ok", "items": "ok", "running_hash": "ok", "sidecar_01": "ok", "chain": "ok"
    }
    assert [(f["name"], f["block_number"], f["derived_block_number"])
            for f in record["findings"]] == [("block_number", UPGRADE_BLOCK, before + 1)]
    # Every node's signature file, re-signed with the test key, verifies over both hashes.
    sigs = [f for f in report["files"] if f["path"].endswith(f"{B6}.rcd_sig")]
    assert len(sigs) == 4
    for sig in sigs:
        statuses = {c["name"]: c["status"] for c in sig["checks"]}
        assert statuses["file_signature"] == statuses["metadata_signature"] == "ok"
    # The text report names the finding too.
    assert run(["verify", str(tree), "--keys", str(keys)]) == 0
    out = capsys.readouterr().out
    assert (f"finding block_number: block_number {UPGRADE_BLOCK} is out of range (negative, as "
            f"in files written during the v5 to v6 upgrade); derived from the chain: "
            f"{before + 1}") in out
    assert out.splitlines()[-1] == "11 files, all checks passed, 1 checks skipped, 1 findings"
    # show reads it as well.
    assert run(["show", str(tree / "record0.0.3" / f"{B6}.rcd.gz"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["block_number"] == UPGRADE_BLOCK


def test_the_real_signatures_no_longer_match_a_changed_block_number(
    tree: Path, test_key: RSAPrivateKey, capsys: pytest.CaptureFixture[str]
) -> None:
    """The signatures really are checked: with the nodes' own keys, the altered file fails."""
    set_block_numbers(tree, {B6: UPGRADE_BLOCK}, test_key)
    assert run(["verify", str(tree), "--keys", str(tree / "node-keys"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    sig = next(f for f in report["files"] if f["path"].endswith(f"record0.0.4/{B6}.rcd_sig"))
    statuses = {c["name"]: c["status"] for c in sig["checks"]}
    assert statuses["file_signature"] == statuses["metadata_signature"] == "fail"


def test_two_upgrade_files_in_a_row(
    tree: Path, test_key: RSAPrivateKey, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = set_block_numbers(tree, {B5: UPGRADE_BLOCK, B6: UPGRADE_BLOCK + 1}, test_key)
    assert run(["verify", str(tree), "--keys", str(keys), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    found = {
        f["path"].rsplit("/", 1)[1]: [(x["block_number"], x["derived_block_number"])
                                       for x in f["findings"]]
        for f in report["files"] if f["kind"] == "record"
    }
    # The first file of the directory has nothing to derive its number from.
    assert found == {f"{B5}.rcd.gz": [(UPGRADE_BLOCK, None)],
                     f"{B6}.rcd.gz": [(UPGRADE_BLOCK + 1, None)]}


def test_a_broken_chain_still_fails_with_a_negative_block_number(
    tree: Path, test_key: RSAPrivateKey, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = set_block_numbers(tree, {B6: UPGRADE_BLOCK}, test_key)
    path = tree / "record0.0.3" / f"{B6}.rcd.gz"
    message = decode_record_file(path.read_bytes(), path.name).message
    message.start_object_running_hash.hash = bytes(48)
    path.write_bytes(gzip_deterministic(encode_record_file(message)))
    assert run(["verify", str(tree), "--keys", str(keys), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    record = next(f for f in report["files"] if f["path"].endswith(f"record0.0.3/{B6}.rcd.gz"))
    failed = {c["name"] for c in record["checks"] if c["status"] == "fail"}
    assert failed == {"running_hash", "chain"}


def test_a_directory_without_sidecars(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.rmtree(tree / "record0.0.3" / "sidecar")
    keys = str(tree / "node-keys")
    assert run(["verify", str(tree), "--keys", keys]) == 0
    out = capsys.readouterr().out
    assert "sidecar_01=skip" in out
    assert out.splitlines()[-1] == "10 files, all checks passed, 2 checks skipped, 0 findings"
    assert run(["verify", str(tree), "--keys", keys, "--require-sidecars"]) == 1
    out = capsys.readouterr().out
    assert f"sidecar_01: missing sidecar file hedera-v6/record0.0.3/sidecar/{B6}_01.rcd.gz" in out


def test_hip_example_names_are_read(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = tree / "record0.0.3"
    for path in [*node.glob("*.rcd.gz"), *(node / "sidecar").glob("*.rcd.gz")]:
        path.rename(path.with_name(path.name.replace(".rcd.gz", ".gz")))
    (node / "notes.gz").write_bytes(b"not a stream file")
    assert run(["verify", str(tree), "--keys", str(tree / "node-keys"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    paths = {f["path"]: f for f in report["files"]}
    assert len(paths) == 11
    record = paths[f"hedera-v6/record0.0.3/{B6}.gz"]
    assert {c["name"]: c["status"] for c in record["checks"]}["sidecar_01"] == "ok"
    assert paths[f"hedera-v6/record0.0.3/sidecar/{B6}_01.gz"]["ok"] is True
    sig = paths[f"hedera-v6/record0.0.5/{B5}.rcd_sig"]
    assert {c["name"]: c["detail"] for c in sig["checks"]}["record_file"].endswith(f"{B5}.gz")
    # A HIP-named file is still checked: corrupt, it fails rather than being skipped.
    (node / f"{B5}.gz").write_bytes(b"\x1f\x8b garbage")
    assert run(["verify", str(tree), "--keys", str(tree / "node-keys")]) == 1
    assert f"FAIL record    hedera-v6/record0.0.3/{B5}.gz" in capsys.readouterr().out
