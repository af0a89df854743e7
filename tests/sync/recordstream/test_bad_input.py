"""Bad bytes give a RemoteProtocolError (decoders) or a failed check (verifier), never a crash."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import RemoteProtocolError
from sync.recordstream import (
    Limits,
    PublicKey,
    decode_record_file,
    decode_sidecar_file,
    decode_signature_file,
    encode_record_file,
    gunzip_limited,
    gzip_deterministic,
    load_public_keys_pem,
    verify_tree,
)
from sync.recordstream import record_stream_pb2 as pb
from tests.sync.recordstream.conftest import B5, B6

R5 = f"record0.0.3/{B5}.rcd.gz"
R6 = f"record0.0.3/{B6}.rcd.gz"
S6 = f"record0.0.3/sidecar/{B6}_01.rcd.gz"


def _reason(exc: pytest.ExceptionInfo[RemoteProtocolError]) -> str:
    return exc.value.reason


def _failures(report_files: object, path: str) -> dict[str, str]:
    (report,) = [f for f in report_files if f.path == path]  # type: ignore[attr-defined]
    return {c.name: c.detail for c in report.failures()}


def test_truncated_gzip(hedera_files: dict[str, bytes]) -> None:
    data = hedera_files[R5]
    for cut in (1, 10, len(data) // 2, len(data) - 1):
        with pytest.raises(RemoteProtocolError) as exc:
            decode_record_file(data[:cut], R5)
        assert exc.value.peer == R5
        assert "gzip" in _reason(exc)
    with pytest.raises(RemoteProtocolError, match="gzip truncated"):
        decode_record_file(data[:-20], R5)


def test_corrupt_gzip_and_trailing_bytes(hedera_files: dict[str, bytes]) -> None:
    data = bytearray(hedera_files[R5])
    data[60] ^= 0xFF
    with pytest.raises(RemoteProtocolError, match="gzip corrupt"):
        decode_record_file(bytes(data), R5)
    with pytest.raises(RemoteProtocolError, match="trailing bytes"):
        decode_record_file(hedera_files[R5] + b"x", R5)
    with pytest.raises(RemoteProtocolError, match="gzip corrupt"):
        decode_record_file(b"not gzip at all", R5)


def test_gzip_bomb_stops_at_limit() -> None:
    bomb = gzip_deterministic(bytes(50 << 20))  # 50 MiB of zeros, ~50 KiB compressed
    assert len(bomb) < 100_000
    with pytest.raises(RemoteProtocolError, match="expands beyond"):
        gunzip_limited(bomb, "bomb.rcd.gz", Limits(max_uncompressed=1 << 20))
    with pytest.raises(RemoteProtocolError, match="compressed size"):
        gunzip_limited(bomb, "bomb.rcd.gz", Limits(max_compressed=1000))
    assert gunzip_limited(gzip_deterministic(b"x" * 1000), "ok", Limits(max_uncompressed=1000))


def test_wrong_record_version(hedera_files: dict[str, bytes]) -> None:
    raw = gzip.decompress(hedera_files[R5])
    for version in (5, 7, -1):
        with pytest.raises(RemoteProtocolError, match=f"wrong version {version}"):
            decode_record_file(
                gzip_deterministic(version.to_bytes(4, "big", signed=True) + raw[4:]), R5
            )
    with pytest.raises(RemoteProtocolError, match="shorter than its version"):
        decode_record_file(gzip_deterministic(b"\0\0"), R5)


def test_wrong_signature_version_and_sizes(hedera_files: dict[str, bytes]) -> None:
    sig = hedera_files[f"record0.0.4/{B5}.rcd_sig"]
    with pytest.raises(RemoteProtocolError, match="wrong version 5"):
        decode_signature_file(b"\x05" + sig[1:], "s")
    with pytest.raises(RemoteProtocolError, match="empty"):
        decode_signature_file(b"", "s")
    with pytest.raises(RemoteProtocolError, match="over limit"):
        decode_signature_file(sig, "s", Limits(max_signature_file=100))
    with pytest.raises(RemoteProtocolError, match="signature missing"):
        decode_signature_file(b"\x06", "s")


def test_protobuf_garbage() -> None:
    for body in (b"\xff\xff\xff", b"\x0a\x05ab", b"\x1a\x7f" + b"x" * 10):
        with pytest.raises(RemoteProtocolError, match="protobuf invalid"):
            decode_record_file(gzip_deterministic(b"\0\0\0\x06" + body), "g")
        with pytest.raises(RemoteProtocolError, match="protobuf invalid"):
            decode_sidecar_file(gzip_deterministic(body), "g")
    with pytest.raises(RemoteProtocolError, match="hapi_proto_version missing"):
        decode_record_file(gzip_deterministic(b"\0\0\0\x06"), "g")


def test_structure_checks(hedera_files: dict[str, bytes]) -> None:
    msg = decode_record_file(hedera_files[R6], R6).message
    cases: dict[str, Callable[[pb.RecordStreamFile], object]] = {
        "no items": lambda m: m.ClearField("record_stream_items"),
        "not a SHA-384 hash object": lambda m: setattr(m.end_object_running_hash, "length", 47),
        "sidecar ids invalid": lambda m: setattr(m.sidecars[0], "id", 0),
    }
    for reason, mutate in cases.items():
        bad = pb.RecordStreamFile()
        bad.CopyFrom(msg)
        mutate(bad)
        with pytest.raises(RemoteProtocolError, match=reason):
            decode_record_file(gzip_deterministic(encode_record_file(bad)), R6)


@settings(deadline=None, max_examples=200)
@given(st.binary(max_size=300))
def test_random_bytes_only_raise_remote_protocol_error(data: bytes) -> None:
    for attempt in (
        lambda: decode_record_file(gzip_deterministic(b"\0\0\0\x06" + data), "f"),
        lambda: decode_record_file(data, "f"),
        lambda: decode_sidecar_file(gzip_deterministic(data), "f"),
        lambda: decode_signature_file(b"\x06" + data, "f"),
        lambda: load_public_keys_pem(data, "f"),
    ):
        try:
            attempt()
        except RemoteProtocolError as exc:
            assert exc.peer == "f" and exc.reason


@settings(deadline=None, max_examples=100)
@given(st.binary(max_size=200), st.sampled_from([R5, R6, S6, f"record0.0.4/{B6}.rcd_sig"]))
def test_verifier_reports_garbage_file_as_failed(
    hedera_files: dict[str, bytes], data: bytes, path: str
) -> None:
    files = dict(hedera_files)
    files[path] = data
    report = verify_tree(files)
    assert not report.ok
    assert path in {f.path for f in report.files if not f.ok}


def test_tampered_item_breaks_running_hash_and_signatures(
    hedera_files: dict[str, bytes], hedera_keys: dict[str, list[PublicKey]]
) -> None:
    msg = decode_record_file(hedera_files[R6], R6).message
    msg.record_stream_items[1].transaction += b"\x00"
    files = dict(hedera_files)
    files[R6] = gzip_deterministic(encode_record_file(msg))
    report = verify_tree(files, hedera_keys)
    assert set(_failures(report.files, R6)) == {"running_hash"}
    for node in ("0.0.3", "0.0.4", "0.0.5", "0.0.6"):
        failed = _failures(report.files, f"record{node}/{B6}.rcd_sig")
        # The metadata hash does not cover items: only the file signature breaks.
        assert set(failed) == {"file_signature"}
        assert "signed hash differs" in failed["file_signature"]
    assert _failures(report.files, f"record0.0.4/{B5}.rcd_sig") == {}


def test_tampered_end_hash_breaks_chain_and_metadata_signature(
    hedera_files: dict[str, bytes], hedera_keys: dict[str, list[PublicKey]]
) -> None:
    msg = decode_record_file(hedera_files[R5], R5).message
    msg.end_object_running_hash.hash = bytes(48)
    files = dict(hedera_files)
    files[R5] = gzip_deterministic(encode_record_file(msg))
    report = verify_tree(files, hedera_keys)
    assert set(_failures(report.files, R5)) == {"running_hash"}
    assert set(_failures(report.files, R6)) == {"chain"}
    assert set(_failures(report.files, f"record0.0.6/{B5}.rcd_sig")) == {
        "file_signature",
        "metadata_signature",
    }


def test_bad_signature_bytes(
    hedera_files: dict[str, bytes], hedera_keys: dict[str, list[PublicKey]]
) -> None:
    path = f"record0.0.5/{B6}.rcd_sig"
    sig = decode_signature_file(hedera_files[path], path)
    flipped = bytearray(sig.metadata_signature.signature)
    flipped[100] ^= 1
    sig.metadata_signature.signature = bytes(flipped)
    files = dict(hedera_files)
    files[path] = b"\x06" + sig.SerializeToString(deterministic=True)
    failed = _failures(verify_tree(files, hedera_keys).files, path)
    assert failed == {"metadata_signature": "signature does not verify (node 0.0.5, metadata hash)"}


def test_signature_from_another_node(
    hedera_files: dict[str, bytes], hedera_keys: dict[str, list[PublicKey]]
) -> None:
    files = dict(hedera_files)
    files[f"record0.0.5/{B6}.rcd_sig"] = hedera_files[f"record0.0.4/{B6}.rcd_sig"]
    failed = _failures(verify_tree(files, hedera_keys).files, f"record0.0.5/{B6}.rcd_sig")
    assert set(failed) == {"file_signature", "metadata_signature"}


def test_missing_and_altered_sidecar(hedera_files: dict[str, bytes]) -> None:
    files = dict(hedera_files)
    del files[S6]
    # HIP-435 lets a reader skip sidecars: absent, they are not checked, unless required.
    report = verify_tree(files)
    assert report.ok
    (record,) = [f for f in report.files if f.path == R6]
    assert [(c.status, c.detail) for c in record.checks if c.name == "sidecar_01"] == [
        ("skip", f"not checked: {S6} absent (--require-sidecars to fail)")
    ]
    failed = _failures(verify_tree(files, require_sidecars=True).files, R6)
    assert failed == {"sidecar_01": f"missing sidecar file {S6}"}

    side = decode_sidecar_file(hedera_files[S6], S6).message
    side.sidecar_records[0].migration = True
    files[S6] = gzip_deterministic(side.SerializeToString(deterministic=True))
    report = verify_tree(files)
    assert set(_failures(report.files, R6)) == {"sidecar_01"}
    assert set(_failures(report.files, S6)) == {"hash"}


def test_unreferenced_sidecar_and_missing_record(hedera_files: dict[str, bytes]) -> None:
    files = dict(hedera_files)
    files[f"record0.0.3/sidecar/{B5}_01.rcd.gz"] = hedera_files[S6]
    del files[R6]
    del files[S6]
    report = verify_tree(files)
    assert set(_failures(report.files, f"record0.0.3/sidecar/{B5}_01.rcd.gz")) == {"referenced"}
    assert _failures(report.files, f"record0.0.4/{B6}.rcd_sig") == {
        "record_file": "record file missing"
    }


def test_misnamed_record_file(hedera_files: dict[str, bytes]) -> None:
    files = dict(hedera_files)
    files["record0.0.3/2022-07-13T08_46_09.000000000Z.rcd.gz"] = files.pop(R5)
    failed = _failures(
        verify_tree(files).files, "record0.0.3/2022-07-13T08_46_09.000000000Z.rcd.gz"
    )
    assert failed == {"items": f"file name should be {B5}.rcd.gz (first item's time)"}


def test_zlib_errors_are_not_leaked() -> None:
    raw = zlib.compress(b"hello")  # a zlib stream, not gzip
    with pytest.raises(RemoteProtocolError, match="gzip corrupt"):
        gunzip_limited(raw, "z")


def test_empty_tree_is_not_ok() -> None:
    assert not verify_tree({}).ok


@settings(deadline=None, max_examples=100)
@given(
    st.lists(
        st.tuples(
            st.binary(max_size=30),
            st.integers(-(2**63), 2**63 - 1),
            st.integers(-(2**31), 2**31 - 1),
        ),
        min_size=1,
        max_size=4,
    ),
    st.binary(max_size=60),
)
def test_well_formed_files_with_hostile_contents_never_crash_the_verifier(
    items: list[tuple[bytes, int, int]], sidecar_body: bytes
) -> None:
    """Valid gzip and protobuf framing around nonsense records, times and sidecars."""
    message = pb.RecordStreamFile(
        hapi_proto_version=pb.SemanticVersion(minor=1),
        start_object_running_hash=pb.HashObject(algorithm=pb.SHA_384, length=48, hash=bytes(48)),
        end_object_running_hash=pb.HashObject(algorithm=pb.SHA_384, length=48, hash=bytes(48)),
    )
    for junk, seconds, nanos in items:
        record = (
            pb.TransactionRecordHeader(
                consensus_timestamp=pb.Timestamp(seconds=seconds, nanos=nanos)
            ).SerializeToString()
            + junk
        )
        message.record_stream_items.append(pb.RecordStreamItem(transaction=junk, record=record))
    message.sidecars.append(
        pb.SidecarMetadata(
            hash=pb.HashObject(algorithm=pb.SHA_384, length=48, hash=bytes(48)),
            id=1,
            types=[pb.SYNCNODE_DELIVERY],
        )
    )
    files = {
        f"record0.0.3/{B5}.rcd.gz": gzip_deterministic(encode_record_file(message)),
        f"record0.0.3/sidecar/{B5}_01.rcd.gz": gzip_deterministic(sidecar_body),
        f"record0.0.4/{B5}.rcd_sig": b"\x06" + sidecar_body,
    }
    report = verify_tree(files)
    assert not report.ok
    assert all(check.detail for f in report.files for check in f.checks)


@settings(deadline=None, max_examples=40)
@given(st.binary(max_size=2000), st.integers(1, 300), st.integers(0, 3))
def test_gunzip_limited_agrees_with_gzip(seed: bytes, repeat: int, level_pick: int) -> None:
    data = seed * repeat  # repetitive data makes long deflate matches across output chunks
    packed = gzip.compress(data, compresslevel=(1, 5, 6, 9)[level_pick], mtime=0)
    assert gunzip_limited(packed, "g") == data
    if len(data) > 1:
        with pytest.raises(RemoteProtocolError, match="expands beyond"):
            gunzip_limited(packed, "g", Limits(max_uncompressed=len(data) - 1))
