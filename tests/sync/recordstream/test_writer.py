"""Our writer: events -> record, sidecar and signature files that our reader verifies."""

from __future__ import annotations

import hashlib
from functools import reduce

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import LocalProtocolError, RemoteProtocolError
from sync.identity import peer_id_of
from sync.recordstream import (
    BlockItem,
    OutputFile,
    RecordStreamWriter,
    SnapshotEvent,
    WriterConfig,
    assemble_block,
    assign_consensus_times,
    consensus_time_ns,
    decode_record_file,
    decode_sidecar_file,
    decode_signature_file,
    event_item,
    fold_running_hash,
    gunzip_limited,
    item_hash,
    parse_instant,
    record_consensus_ns,
    running_hash,
    verify_tree,
)
from sync.recordstream import record_stream_pb2 as pb

NODE_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
NODE = peer_id_of(NODE_KEY)
OTHER_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
SENDERS = [peer_id_of(Ed25519PrivateKey.from_private_bytes(bytes([i]) * 32)) for i in range(3)]
BASE_MS = 1_700_000_000_000
SIGNATURE_CHECKS = {"file_signature", "metadata_signature"}


@pytest.fixture(scope="module")
def rsa_key() -> RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=3072)


def make_event(lamport: int, n: int, seq: int = 0, received: int = 0) -> SnapshotEvent:
    body = f"event {lamport}/{n}".encode()
    return SnapshotEvent(
        seq=seq,
        message_id=hashlib.sha256(body).hexdigest(),
        channel=f"chan-{n % 2}",
        sender=SENDERS[n % len(SENDERS)],
        lamport=lamport,
        wire=b"wire:" + body,
        received_at_ms=received,
    )


def ordered(events: list[SnapshotEvent]) -> list[SnapshotEvent]:
    return sorted(events, key=lambda e: (e.lamport, e.message_id))


def sample_events() -> list[SnapshotEvent]:
    # Three periods of 1 s; two events share a Lamport timestamp.
    stamps = [BASE_MS, BASE_MS, BASE_MS + 400, BASE_MS + 1500, BASE_MS + 3200, BASE_MS + 3999]
    return ordered([make_event(t, i, seq=i, received=t + 7) for i, t in enumerate(stamps)])


def write_all(writer: RecordStreamWriter, events: list[SnapshotEvent]) -> dict[str, bytes]:
    out: list[OutputFile] = []
    for event in events:
        out += writer.add(event)
    out += writer.close()
    files = {f.path: f.data for f in out}
    assert len(files) == len(out)
    return files


def test_writer_output_verifies_and_chains() -> None:
    config = WriterConfig(node=NODE, period_ns=1_000_000_000, first_block=10, delivery_sidecar=True)
    files = write_all(RecordStreamWriter(config, ed25519_key=NODE_KEY), sample_events())
    records = sorted(p for p in files if p.endswith(".rcd.gz") and "/sidecar/" not in p)
    assert len(records) == 3
    assert len([p for p in files if p.endswith(".rcd_sig")]) == 3
    assert len([p for p in files if "/sidecar/" in p]) == 3
    report = verify_tree(files)  # the Ed25519 key comes from the node's peer id
    assert report.ok, [(f.path, f.failures()) for f in report.files if not f.ok]
    statuses = {c.name: c.status for f in report.files for c in f.checks}
    assert statuses["file_signature"] == "ok" and statuses["chain"] == "ok"
    blocks = [decode_record_file(files[p], p).message.block_number for p in records]
    assert blocks == [10, 11, 12]
    first = decode_record_file(files[records[0]], records[0]).message
    assert first.start_object_running_hash.hash == bytes(48)
    assert (first.hapi_proto_version.major, first.hapi_proto_version.minor) == (0, 1)
    assert [len(decode_record_file(files[p], p).message.record_stream_items) for p in records] == [
        3,
        1,
        2,
    ]


def test_file_names_and_consensus_times() -> None:
    events = sample_events()
    config = WriterConfig(node=NODE, period_ns=1_000_000_000)
    files = write_all(RecordStreamWriter(config), events)
    assert not any(p.endswith(".rcd_sig") for p in files)  # no key, no signature file
    names = sorted(files)
    assert names[0] == f"record{NODE}/2023-11-14T22_13_20.000000000Z.rcd.gz"
    assert names[1] == f"record{NODE}/2023-11-14T22_13_21.500000000Z.rcd.gz"
    msg = decode_record_file(files[names[0]], names[0]).message
    times = [record_consensus_ns(item.record, "x") for item in msg.record_stream_items]
    # Two events share the first Lamport ms: ranks 0 and 1 as tie-break.
    assert times == [BASE_MS * 10**6, BASE_MS * 10**6 + 1, (BASE_MS + 400) * 10**6]
    assert parse_instant(names[1].rsplit("/", 1)[1][: -len(".rcd.gz")]) == (BASE_MS + 1500) * 10**6


def test_item_layout_is_the_event_mapping() -> None:
    event = make_event(BASE_MS, 1, seq=42, received=99)
    record_bytes, tx = event_item(event, consensus_time_ns(event.lamport, 0))
    assert tx == event.wire
    record = pb.SyncnodeRecord.FromString(record_bytes)
    assert record.transaction_hash == hashlib.sha384(event.wire).digest()
    assert record.event.message_id == event.message_id
    assert (record.event.channel, record.event.sender) == (event.channel, event.sender)
    assert record.event.lamport == event.lamport
    # Node-local data (seq 42, received 99) is not in the record: these are all its fields.
    assert [f.name for f, _ in record.ListFields()] == [
        "transaction_hash",
        "consensus_timestamp",
        "event",
    ]
    assert [f.name for f, _ in record.event.ListFields()] == [
        "message_id",
        "channel",
        "sender",
        "lamport",
    ]
    header = pb.TransactionRecordHeader.FromString(record_bytes)
    assert header.consensus_timestamp.seconds == BASE_MS // 1000


def test_delivery_sidecar_contents() -> None:
    events = sample_events()[:2]
    config = WriterConfig(node=NODE, delivery_sidecar=True)
    files = write_all(RecordStreamWriter(config), events)
    (side_path,) = [p for p in files if "/sidecar/" in p]
    assert side_path.endswith("Z_01.rcd.gz")
    side = decode_sidecar_file(files[side_path], side_path).message
    assert [r.syncnode_delivery.seq for r in side.sidecar_records] == [e.seq for e in events]
    assert [r.syncnode_delivery.received_at_ms for r in side.sidecar_records] == [
        e.received_at_ms for e in events
    ]
    (record_path,) = [p for p in files if p.endswith(".rcd.gz") and p != side_path]
    (meta,) = decode_record_file(files[record_path], record_path).message.sidecars
    assert list(meta.types) == [pb.SYNCNODE_DELIVERY]


def test_rsa_and_ed25519_signature_file(rsa_key: RSAPrivateKey) -> None:
    config = WriterConfig(node=NODE)
    writer = RecordStreamWriter(config, ed25519_key=NODE_KEY, rsa_key=rsa_key)
    files = write_all(writer, sample_events()[:1])
    (sig_path,) = [p for p in files if p.endswith(".rcd_sig")]
    sig = decode_signature_file(files[sig_path], sig_path)
    # Fields 1 and 2 exactly as a Hedera node writes them; Ed25519 in our extra fields.
    for obj in (sig.file_signature, sig.metadata_signature):
        assert (obj.type, obj.length, obj.checksum) == (pb.SHA_384_WITH_RSA, 384, -283)
    for obj in (sig.secondary_file_signature, sig.secondary_metadata_signature):
        assert (obj.type, obj.length, obj.checksum) == (pb.ED25519, 64, 37)
    report = verify_tree(files, {NODE: [rsa_key.public_key()]})
    assert report.ok, [(f.path, f.failures()) for f in report.files if not f.ok]
    (sig_report,) = [f for f in report.files if f.kind == "signature"]
    assert [c.status for c in sig_report.checks] == ["ok"] * 6
    # Without the RSA key the Ed25519 pair still verifies from the peer id, RSA is skipped...
    assert verify_tree(files).ok
    # ... and another node's RSA key fails.
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert not verify_tree(files, {NODE: [other.public_key()]}).ok


def test_ed25519_signature_by_wrong_key_fails() -> None:
    config = WriterConfig(node=NODE)
    files = write_all(RecordStreamWriter(config, ed25519_key=OTHER_KEY), sample_events()[:1])
    report = verify_tree(files)
    (sig_report,) = [f for f in report.files if f.kind == "signature"]
    assert {c.name for c in sig_report.failures()} == {"file_signature", "metadata_signature"}


def _same_content(original: bytes, flipped: bytes) -> bool:
    try:
        return gunzip_limited(flipped, "f") == gunzip_limited(original, "f")
    except RemoteProtocolError:
        return False


def test_every_flipped_byte_fails_verification() -> None:
    """Every bit flip is caught, except in the few gzip bits that carry no content.

    Those are the header's FTEXT bit, MTIME, XFL and OS bytes and the padding bits after the
    last deflate block: HIP-435 hashes the uncompressed bytes, so a flip there leaves every
    hash, and therefore every signature, valid.
    """
    config = WriterConfig(node=NODE, period_ns=1_000_000_000, delivery_sidecar=True)
    files = write_all(RecordStreamWriter(config, ed25519_key=NODE_KEY), sample_events()[:3])
    assert sorted(p.rsplit(".", 1)[1] for p in files) == ["gz", "gz", "rcd_sig"]
    assert verify_tree(files).ok
    for path, data in files.items():
        for position in range(len(data)):
            for mask in (0x01, 0x80):
                tampered = bytearray(data)
                tampered[position] ^= mask
                report = verify_tree({**files, path: bytes(tampered)})
                if path.endswith(".gz") and _same_content(data, bytes(tampered)):
                    assert position in (3, 4, 5, 6, 7, 8, 9, len(data) - 9), (path, position)
                    assert report.ok
                    continue
                (own,) = [f for f in report.files if f.path == path]
                failed = {c.name for c in own.failures()}
                # gzip's CRC-32 catches any content change; a signature file either no longer
                # parses or no longer verifies.
                allowed = {"decode"} if path.endswith(".gz") else {"decode", *SIGNATURE_CHECKS}
                assert failed and failed <= allowed, (path, position, failed)


def test_two_nodes_write_identical_record_files() -> None:
    events = sample_events()
    # Node-local data differs between the nodes; the record files must not.
    elsewhere = [
        SnapshotEvent(e.seq + 1000, e.message_id, e.channel, e.sender, e.lamport, e.wire, 5)
        for e in events
    ]
    a = write_all(RecordStreamWriter(WriterConfig(node="A"), ed25519_key=NODE_KEY), events)
    b = write_all(RecordStreamWriter(WriterConfig(node="A"), ed25519_key=OTHER_KEY), elsewhere)
    records = [p for p in a if p.endswith(".rcd.gz")]
    assert records and all(a[p] == b[p] for p in records)


def test_out_of_order_and_closed_writer_are_local_errors() -> None:
    writer = RecordStreamWriter(WriterConfig(node=NODE))
    events = sample_events()
    writer.add(events[1])
    with pytest.raises(LocalProtocolError):
        writer.add(events[0])
    with pytest.raises(LocalProtocolError):
        writer.add(events[1])
    writer.close()
    with pytest.raises(LocalProtocolError):
        writer.add(events[2])
    with pytest.raises(LocalProtocolError):
        consensus_time_ns(1, 1_000_000)
    with pytest.raises(LocalProtocolError):
        list(assign_consensus_times([events[1], events[0]]))
    with pytest.raises(LocalProtocolError):
        WriterConfig(node="a/b")
    with pytest.raises(LocalProtocolError):
        assemble_block("n", [], bytes(48), 0)


event_lists = st.lists(
    st.tuples(st.integers(0, 5_000), st.integers(0, 50)), min_size=1, max_size=25, unique=True
).map(lambda pairs: ordered([make_event(BASE_MS + t, n) for t, n in pairs]))


@settings(deadline=None, max_examples=40)
@given(event_lists, st.integers(1, 3))
def test_splitting_the_log_between_writers_gives_the_same_files(
    events: list[SnapshotEvent], split_period: int
) -> None:
    """A snapshot resumed from a previous run's running hash and block equals a single run."""
    period = 1_000_000_000
    config = WriterConfig(node=NODE, period_ns=period)
    whole = write_all(RecordStreamWriter(config), events)
    assigned = list(assign_consensus_times(events))
    cut = (BASE_MS // 1000 + split_period) * 10**9
    before = [e for e, t in assigned if t < cut]
    after = [e for e, t in assigned if t >= cut]
    first = RecordStreamWriter(config)
    parts = write_all(first, before)
    resumed = WriterConfig(
        node=NODE,
        period_ns=period,
        first_block=first.next_block,
        start_running_hash=first.running_hash,
    )
    if after and before and after[0].lamport == before[-1].lamport:
        return  # a cut inside one Lamport ms would restart the tie-break rank
    parts.update(write_all(RecordStreamWriter(resumed), after))
    assert parts == whole
    assert verify_tree(whole).ok


@settings(deadline=None, max_examples=50)
@given(
    st.lists(st.tuples(st.binary(max_size=40), st.binary(max_size=40)), max_size=12),
    st.integers(0, 12),
)
def test_running_hash_is_a_fold_of_independent_item_hashes(
    items: list[tuple[bytes, bytes]], cut: int
) -> None:
    start = bytes(range(48))
    hashes = [item_hash(r, t) for r, t in items]  # any order, any worker
    folded = reduce(fold_running_hash, hashes, start)
    assert running_hash(start, items) == folded
    assert running_hash(running_hash(start, items[:cut]), items[cut:]) == folded


def test_assemble_block_matches_writer() -> None:
    events = sample_events()[:3]
    items = [BlockItem(t, *event_item(e, t)) for e, t in assign_consensus_times(events)]
    outputs, end = assemble_block(NODE, items, bytes(48), 0, ed25519_key=NODE_KEY)
    writer = RecordStreamWriter(WriterConfig(node=NODE, period_ns=10**12), ed25519_key=NODE_KEY)
    assert {f.path: f.data for f in outputs} == write_all(writer, events)
    assert end == writer.running_hash


@settings(deadline=None, max_examples=30)
@given(event_lists, st.integers(0, 10**6), st.integers(0, 10**9))
def test_any_two_nodes_with_the_same_log_write_identical_record_files(
    events: list[SnapshotEvent], seq_offset: int, received_offset: int
) -> None:
    elsewhere = [
        SnapshotEvent(
            e.seq + seq_offset,
            e.message_id,
            e.channel,
            e.sender,
            e.lamport,
            e.wire,
            e.received_at_ms + received_offset,
        )
        for e in events
    ]
    config = WriterConfig(node="shared", period_ns=700_000_000)
    mine = write_all(RecordStreamWriter(config, ed25519_key=NODE_KEY), events)
    theirs = write_all(RecordStreamWriter(config, ed25519_key=OTHER_KEY), elsewhere)
    records = {p for p in mine if p.endswith(".rcd.gz")}
    assert records == {p for p in theirs if p.endswith(".rcd.gz")}
    assert all(mine[p] == theirs[p] for p in records)
    # Each node's signature file signs the same file hash with its own key.
    for path in (p for p in mine if p.endswith(".rcd_sig")):
        ours = decode_signature_file(mine[path], path)
        other = decode_signature_file(theirs[path], path)
        assert ours.file_signature.hash_object == other.file_signature.hash_object
        assert ours.file_signature.signature != other.file_signature.signature


def test_rsa_only_signature_file_is_hedera_shaped(rsa_key: RSAPrivateKey) -> None:
    files = write_all(
        RecordStreamWriter(WriterConfig(node="0.0.9"), rsa_key=rsa_key), sample_events()[:3]
    )
    (sig_path,) = [p for p in files if p.endswith(".rcd_sig")]
    sig = decode_signature_file(files[sig_path], sig_path)
    assert not sig.HasField("secondary_file_signature")
    assert sig.file_signature.type == pb.SHA_384_WITH_RSA
    assert files[sig_path][:1] == b"\x06"
    assert verify_tree(files, {"0.0.9": [rsa_key.public_key()]}).ok
    assert not verify_tree(files, {"0.0.9": []}).ok
