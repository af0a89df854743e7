"""Record files built in two halves (items first, chain frame later) equal ``assemble_block``."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.recordstream import (
    BlockItem,
    SnapshotEvent,
    assemble_block,
    assign_consensus_times,
    delivery_sidecar_record,
    event_item,
    event_record,
    gunzip_limited,
    gzip_deterministic,
    sha384,
)
from sync.recordstream.blocks import (
    BlockBody,
    encode_delivery,
    encode_record,
    fold_item_hashes,
    frame_record_file,
)

NODE = "0.0.3"
texts = st.text(max_size=20)
events = st.builds(SnapshotEvent, st.integers(0, 2**63 - 1), texts, texts, texts,
                   st.integers(0, 2**41), st.binary(max_size=300),
                   st.integers(-(2**63), 2**63 - 1))


@settings(deadline=None, max_examples=200)
@given(events, st.integers(0, 2**62))
def test_hand_encoded_records_equal_protobuf(event: SnapshotEvent, consensus_ns: int) -> None:
    assert encode_record(event.wire, consensus_ns, event.message_id, event.channel,
                         event.sender, event.lamport) == event_record(event, consensus_ns)
    assert encode_delivery(consensus_ns, event.message_id, event.seq, event.received_at_ms) == (
        delivery_sidecar_record(event, consensus_ns).SerializeToString(deterministic=True))


@settings(deadline=None, max_examples=40)
@given(st.lists(events, min_size=1, max_size=12), st.integers(0, 2**40), st.booleans(),
       st.binary(min_size=48, max_size=48))
def test_framed_block_equals_assemble_block(
    batch: list[SnapshotEvent], block: int, sidecars: bool, start: bytes
) -> None:
    ordered = sorted({(e.lamport, e.message_id): e for e in batch}.values(),
                     key=lambda e: (e.lamport, e.message_id))
    stamped = list(assign_consensus_times(ordered))
    body = BlockBody(sidecars)
    items = []
    for e, ns in stamped:
        body.add(e.seq, e.message_id, e.channel, e.sender, e.lamport, e.wire, e.received_at_ms,
                 ns)
        extra = (delivery_sidecar_record(e, ns),) if sidecars else ()
        items.append(BlockItem(ns, *event_item(e, ns), extra))
    outputs, end = assemble_block(NODE, items, start, block)
    assert fold_item_hashes(start, body.hashes) == end
    side_hash = sha384(body.sidecar) if sidecars else None
    raw = frame_record_file(body.body, start, end, block, side_hash)
    assert gzip_deterministic(raw) == outputs[0].data
    assert gunzip_limited(outputs[0].data, "x") == raw
    if sidecars:
        assert gzip_deterministic(body.sidecar) == outputs[1].data
    assert body.count == len(items) and body.first_ns == stamped[0][1]
