"""Every expected value of tests/testdata/vectors.md, recomputed from the Hedera v6 files."""

from __future__ import annotations

import gzip
from typing import Any

import pytest

from sync.recordstream import (
    PublicKey,
    decode_record_file,
    decode_sidecar_file,
    decode_signature_file,
    encode_record_file,
    encode_sidecar_file,
    encode_signature_file,
    file_hash,
    fold_running_hash,
    item_hash,
    metadata_hash,
    record_consensus_ns,
    record_file_name,
    running_hash,
    sha384,
    verify_signature_object,
    verify_tree,
)
from sync.recordstream import record_stream_pb2 as pb
from tests.sync.recordstream.conftest import B5, B6, NODES

EXPECTED: dict[str, dict[str, Any]] = {
    B5: {
        "block": 5,
        "items": 1,
        "sidecars": 0,
        "consensus": (1657701968041986003, 1657701968041986003),
        "file": (
            "69a4354de5aeb12fbc989ae086fc291cfc1b61415391b4a4"
            "6915b32aef722a511c4ceba60ecda72d527cc4866a4d235b"
        ),
        "metadata": (
            "361c0176ba28cc55525c50e7e75e58618b451f3dca402d9b"
            "e19626159d939e7a569534658125732c1af31ff6f4a8e283"
        ),
        "start": (
            "13d2594b9e9dbb73dad0cad67a96ad7a0e249af8693aa894"
            "003876c9ddd5534b3143e4d785e04fc0c461945a03e85178"
        ),
        "end": (
            "a6c241fad2c636f68a6aa0da9293245a5ef0ebef345cd139"
            "858068ff7998716cefe0fd3afa0d21304725507061975279"
        ),
    },
    B6: {
        "block": 6,
        "items": 2,
        "sidecars": 1,
        "consensus": (1657701971304284003, 1657701971304284004),
        "file": (
            "ed518c8d05f470d4540db35ea8665ab158f9aeb0bcaa3332"
            "d171c1efba119da52c1ee510df599269b022d963d4d1e474"
        ),
        "metadata": (
            "b13a2b638c5688dbec43b97dbee8ad637d2d42376fc313c6"
            "28a990ac65aefdbd39832cf5ece42b925a520ed2d2bf8eac"
        ),
        "start": (
            "a6c241fad2c636f68a6aa0da9293245a5ef0ebef345cd139"
            "858068ff7998716cefe0fd3afa0d21304725507061975279"
        ),
        "end": (
            "3064b824b8b9f9ece011f88a26c030c9f6b822f30fbcabcc"
            "7240a220ea42bbdbf305db415a4e41307d0630d5cefe4550"
        ),
    },
}
SIDECAR = f"record0.0.3/sidecar/{B6}_01.rcd.gz"
SIDECAR_HASH = (
    "1ed54ea01aab5e726a087e94a0dd52c0f49b149d7a773ae7"
    "1a3dc099f623bcf1840393db68f8db476ab11e6159f030f2"
)


def _record(files: dict[str, bytes], stem: str) -> pb.RecordStreamFile:
    return decode_record_file(files[f"record0.0.3/{stem}.rcd.gz"], stem).message


@pytest.mark.parametrize("stem", [B5, B6])
def test_record_file_facts_and_hashes(hedera_files: dict[str, bytes], stem: str) -> None:
    want = EXPECTED[stem]
    parsed = decode_record_file(hedera_files[f"record0.0.3/{stem}.rcd.gz"], stem)
    msg = parsed.message
    assert parsed.uncompressed[:4] == b"\x00\x00\x00\x06"
    hapi = msg.hapi_proto_version
    assert (hapi.major, hapi.minor, hapi.patch) == (0, 28, 0)
    assert msg.block_number == want["block"]
    assert len(msg.record_stream_items) == want["items"]
    assert len(msg.sidecars) == want["sidecars"]
    times = [record_consensus_ns(item.record, stem) for item in msg.record_stream_items]
    assert (times[0], times[-1]) == want["consensus"]
    assert record_file_name(times[0]) == f"{stem}.rcd.gz"
    start = msg.start_object_running_hash.hash
    end = msg.end_object_running_hash.hash
    assert start.hex() == want["start"]
    assert end.hex() == want["end"]
    assert file_hash(parsed.uncompressed).hex() == want["file"]
    assert metadata_hash(hapi, start, end, msg.block_number).hex() == want["metadata"]


@pytest.mark.parametrize("stem", [B5, B6])
def test_end_running_hash_recomputed_from_items(hedera_files: dict[str, bytes], stem: str) -> None:
    msg = _record(hedera_files, stem)
    h = bytes.fromhex(EXPECTED[stem]["start"])
    # Item hashes are independent of each other (a Spark job computes them in parallel); only the
    # fold is sequential.
    hashes = [item_hash(item.record, item.transaction) for item in msg.record_stream_items]
    for digest in hashes:
        h = fold_running_hash(h, digest)
    assert h.hex() == EXPECTED[stem]["end"]
    pairs = [(item.record, item.transaction) for item in msg.record_stream_items]
    assert running_hash(msg.start_object_running_hash.hash, pairs).hex() == EXPECTED[stem]["end"]


def test_chain_from_block_5_to_block_6(hedera_files: dict[str, bytes]) -> None:
    five, six = _record(hedera_files, B5), _record(hedera_files, B6)
    assert six.start_object_running_hash.hash == five.end_object_running_hash.hash
    assert six.block_number == five.block_number + 1
    items = [
        (i.record, i.transaction) for i in [*five.record_stream_items, *six.record_stream_items]
    ]
    # Folding both files' items from block 5's start hash lands on block 6's end hash.
    assert running_hash(five.start_object_running_hash.hash, items).hex() == EXPECTED[B6]["end"]


def test_sidecar_hash_metadata_and_contents(hedera_files: dict[str, bytes]) -> None:
    side = decode_sidecar_file(hedera_files[SIDECAR], SIDECAR)
    assert sha384(side.uncompressed).hex() == SIDECAR_HASH
    (meta,) = _record(hedera_files, B6).sidecars
    assert meta.id == 1
    assert list(meta.types) == [pb.CONTRACT_STATE_CHANGE, pb.CONTRACT_BYTECODE]
    assert meta.hash.hash.hex() == SIDECAR_HASH
    assert meta.hash.algorithm == pb.SHA_384 and meta.hash.length == 48
    records = side.message.sidecar_records
    assert [r.WhichOneof("sidecar_records") for r in records] == ["state_changes", "bytecode"]


@pytest.mark.parametrize("node", NODES)
@pytest.mark.parametrize("stem", [B5, B6])
def test_signature_file_verifies_with_node_key(
    hedera_files: dict[str, bytes], hedera_keys: dict[str, list[PublicKey]], node: str, stem: str
) -> None:
    sig = decode_signature_file(hedera_files[f"record{node}/{stem}.rcd_sig"], stem)
    for obj, expected in (
        (sig.file_signature, EXPECTED[stem]["file"]),
        (sig.metadata_signature, EXPECTED[stem]["metadata"]),
    ):
        assert (obj.type, obj.length, obj.checksum) == (pb.SHA_384_WITH_RSA, 384, -283)
        assert verify_signature_object(obj, bytes.fromhex(expected), hedera_keys[node]) is None
        # ... and with no other node's key.
        for other in NODES:
            if other != node:
                problem = verify_signature_object(obj, bytes.fromhex(expected), hedera_keys[other])
                assert problem == "signature does not verify"


def test_reserialization_reproduces_uncompressed_bytes(hedera_files: dict[str, bytes]) -> None:
    for path, data in hedera_files.items():
        if path.endswith(".rcd_sig"):
            assert encode_signature_file(decode_signature_file(data, path)) == data
        elif "/sidecar/" in path:
            side = decode_sidecar_file(data, path)
            assert encode_sidecar_file(side.message) == gzip.decompress(data)
        else:
            record = decode_record_file(data, path)
            assert encode_record_file(record.message) == gzip.decompress(data)


def test_whole_tree_verifies(
    hedera_files: dict[str, bytes], hedera_keys: dict[str, list[PublicKey]]
) -> None:
    report = verify_tree(hedera_files, hedera_keys)
    assert report.ok, [(f.path, f.failures()) for f in report.files if not f.ok]
    by_path = {f.path: f for f in report.files}
    assert len(by_path) == 11
    six = {c.name: c.status for c in by_path[f"record0.0.3/{B6}.rcd.gz"].checks}
    assert six == {
        "decode": "ok",
        "items": "ok",
        "running_hash": "ok",
        "sidecar_01": "ok",
        "chain": "ok",
    }
    signature_checks = [
        c for f in report.files if f.kind == "signature" for c in f.checks if "signature" in c.name
    ]
    assert len(signature_checks) == 16
    assert all(c.status == "ok" for c in signature_checks)
    assert dict(by_path[f"record0.0.3/{B5}.rcd.gz"].hashes)["file"] == EXPECTED[B5]["file"]
    assert dict(by_path[SIDECAR].hashes)["hash"] == SIDECAR_HASH


def test_without_keys_signatures_are_skipped_not_passed(hedera_files: dict[str, bytes]) -> None:
    report = verify_tree(hedera_files, None)
    statuses = {c.status for f in report.files if f.kind == "signature" for c in f.checks[2:]}
    assert statuses == {"skip"}
    assert report.ok


def test_a_node_key_missing_from_keydir_fails(
    hedera_files: dict[str, bytes], hedera_keys: dict[str, list[PublicKey]]
) -> None:
    keys = {node: k for node, k in hedera_keys.items() if node != "0.0.5"}
    report = verify_tree(hedera_files, keys)
    failed = {f.path for f in report.files if not f.ok}
    assert failed == {f"record0.0.5/{B5}.rcd_sig", f"record0.0.5/{B6}.rcd_sig"}
