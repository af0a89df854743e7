"""Canonical encoding of CRDT messages: round trip, determinism, and a decoder that only ever
raises RemoteProtocolError on bad bytes."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.crdt import (
    INT64_MAX,
    INT64_MIN,
    MAX_MESSAGE_BYTES,
    CrdtMessage,
    Operation,
    Value,
    decode_message,
    encode_message,
    value_text,
)
from sync.errors import LocalProtocolError, RemoteProtocolError

identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)
unicode_text = st.text(st.characters(codec="utf-8"), max_size=20)
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(INT64_MIN, INT64_MAX),
    st.floats(allow_nan=False, allow_infinity=False),
    unicode_text,
)


@st.composite
def messages(draw: st.DrawFn) -> CrdtMessage:
    operation = draw(st.sampled_from(Operation))
    if operation is Operation.DELETE:
        cells = {}
    else:
        cells = draw(
            st.dictionaries(identifiers, values, min_size=operation is Operation.UPDATE, max_size=5)
        )
    return CrdtMessage(
        operation,
        draw(identifiers),
        draw(unicode_text.filter(bool)),
        cells,
        timestamp=draw(st.integers(0, 2**64 - 1)),
        sender=draw(identifiers),
    )


def decode_like(message: CrdtMessage, data: bytes) -> CrdtMessage:
    return decode_message(data, timestamp=message.timestamp, sender=message.sender)


@settings(deadline=None, max_examples=300)
@given(messages())
def test_round_trip(message: CrdtMessage) -> None:
    data = encode_message(message)
    decoded = decode_like(message, data)
    assert decoded == message
    assert dict(decoded.values) == dict(message.values)
    assert [type(v) for v in decoded.values.values()] == [type(v) for v in message.values.values()]
    assert encode_message(decoded) == data


@settings(deadline=None, max_examples=100)
@given(messages(), st.randoms(use_true_random=False))
def test_encoding_ignores_dict_insertion_order(message: CrdtMessage, rnd: random.Random) -> None:
    items = list(message.values.items())
    rnd.shuffle(items)
    shuffled = CrdtMessage(
        message.operation,
        message.table,
        message.entity_id,
        dict(items),
        timestamp=message.timestamp,
        sender=message.sender,
    )
    assert encode_message(shuffled) == encode_message(message)


def test_documented_example_bytes() -> None:
    message = CrdtMessage(
        Operation.UPSERT, "artists", "a1", {"plays": 3, "name": "Ana"}, timestamp=7, sender="P"
    )
    expected = (
        b'{"crdt":1,"id":"a1","op":"upsert","table":"artists","values":{"name":"Ana","plays":3}}'
    )
    assert encode_message(message) == expected


def test_values_keep_their_type() -> None:
    message = CrdtMessage(
        Operation.UPDATE,
        "t",
        "e",
        {"i": 1, "f": 1.0, "b": True, "s": "1", "n": None, "u": "é"},
        timestamp=1,
        sender="P",
    )
    data = encode_message(message)
    assert b'"f":1.0' in data and b'"i":1' in data and "é".encode() in data
    decoded = decode_like(message, data)
    assert {k: type(v) for k, v in decoded.values.items()} == {
        "b": bool,
        "f": float,
        "i": int,
        "n": type(None),
        "s": str,
        "u": str,
    }


GOOD = b'{"crdt":1,"id":"e","op":"update","table":"t","values":{"a":1}}'
assert GOOD.count(b'"a":1') == 1

MALFORMED = {
    "not json": b"{",
    "not utf-8": b'{"crdt":1,"id":"\xff","op":"delete","table":"t","values":{}}',
    "not an object": b"[1]",
    "missing key": b'{"crdt":1,"id":"e","op":"update","table":"t"}',
    "extra key": b'{"crdt":1,"id":"e","op":"update","table":"t","values":{"a":1},"x":0}',
    "version 2": b'{"crdt":2,"id":"e","op":"update","table":"t","values":{"a":1}}',
    "version true": b'{"crdt":true,"id":"e","op":"update","table":"t","values":{"a":1}}',
    "unknown op": b'{"crdt":1,"id":"e","op":"merge","table":"t","values":{"a":1}}',
    "op not a string": b'{"crdt":1,"id":"e","op":[],"table":"t","values":{"a":1}}',
    "bad table name": b'{"crdt":1,"id":"e","op":"update","table":"t-1","values":{"a":1}}',
    "empty entity": b'{"crdt":1,"id":"","op":"update","table":"t","values":{"a":1}}',
    "entity not a string": b'{"crdt":1,"id":5,"op":"update","table":"t","values":{"a":1}}',
    "values not an object": b'{"crdt":1,"id":"e","op":"update","table":"t","values":[]}',
    "bad column name": b'{"crdt":1,"id":"e","op":"update","table":"t","values":{"a b":1}}',
    "nested value": b'{"crdt":1,"id":"e","op":"update","table":"t","values":{"a":[1]}}',
    "NaN": b'{"crdt":1,"id":"e","op":"update","table":"t","values":{"a":NaN}}',
    "infinite float": b'{"crdt":1,"id":"e","op":"update","table":"t","values":{"a":1e999}}',
    "int over 64 bits": GOOD.replace(b'"a":1', b'"a":9223372036854775808'),
    "huge int": b'{"crdt":1,"id":"e","op":"update","table":"t","values":{"a":'
    + b"9" * 5000
    + b"}}",
    "lone surrogate": b'{"crdt":1,"id":"\\ud800","op":"delete","table":"t","values":{}}',
    "delete with values": b'{"crdt":1,"id":"e","op":"delete","table":"t","values":{"a":1}}',
    "empty update": b'{"crdt":1,"id":"e","op":"update","table":"t","values":{}}',
    "whitespace": b'{"crdt": 1,"id":"e","op":"update","table":"t","values":{"a":1}}',
    "key order": b'{"id":"e","crdt":1,"op":"update","table":"t","values":{"a":1}}',
    "duplicate key": b'{"crdt":1,"id":"e","op":"update","table":"t","values":{"a":1,"a":1}}',
    "escaped non-ascii": b'{"crdt":1,"id":"\\u00e9","op":"delete","table":"t","values":{}}',
    "number spelling": b'{"crdt":1,"id":"e","op":"update","table":"t","values":{"a":1E2}}',
    "deep nesting": b"[" * 50_000 + b"]" * 50_000,
    "too large": GOOD[:-2] + b',"b":"' + b"x" * MAX_MESSAGE_BYTES + b'"}}',
}


def test_good_sample_decodes() -> None:
    message = decode_message(GOOD, timestamp=1, sender="P")
    assert (message.operation, message.table, message.entity_id) == (Operation.UPDATE, "t", "e")
    assert dict(message.values) == {"a": 1}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_is_remote_protocol_error(name: str) -> None:
    with pytest.raises(RemoteProtocolError) as caught:
        decode_message(MALFORMED[name], timestamp=1, sender="peerX")
    assert caught.value.peer == "peerX"
    assert caught.value.reason


def test_size_limit_can_be_lowered() -> None:
    with pytest.raises(RemoteProtocolError, match="exceeds 16"):
        decode_message(GOOD, timestamp=1, sender="P", max_size=16)


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(data: bytes) -> None:
    try:
        message = decode_message(data, timestamp=1, sender="P")
    except RemoteProtocolError:
        return
    assert encode_message(message) == data


@settings(deadline=None, max_examples=300)
@given(messages(), st.data())
def test_fuzz_mutated_encodings(message: CrdtMessage, data: st.DataObject) -> None:
    raw = bytearray(encode_message(message))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(raw) - 1))
        action = data.draw(st.sampled_from(["flip", "delete", "insert"]))
        if action == "flip":
            raw[position] ^= 1 << data.draw(st.integers(0, 7))
        elif action == "delete":
            del raw[position]
        else:
            raw.insert(position, data.draw(st.sampled_from(b'{}[]",:\\0 e-.9\xc3')))
        if not raw:
            break
    try:
        decoded = decode_like(message, bytes(raw))
    except RemoteProtocolError:
        return
    assert encode_message(decoded) == bytes(raw)


any_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=6,
)


@settings(deadline=None, max_examples=300)
@given(
    st.fixed_dictionaries(
        {
            "crdt": st.just(1) | any_json,
            "id": st.just("e") | any_json,
            "op": st.sampled_from(["upsert", "update", "delete"]) | any_json,
            "table": st.just("t") | any_json,
            "values": st.dictionaries(st.text(max_size=3), any_json, max_size=3) | any_json,
        }
    ),
    st.booleans(),
)
def test_fuzz_well_framed_documents_with_wrong_fields(
    doc: dict[str, object], compact: bool
) -> None:
    """Canonical-looking JSON that reaches the field checks: decodes canonically or is refused."""
    separators = (",", ":") if compact else (", ", ": ")
    data = json.dumps(doc, sort_keys=True, separators=separators, ensure_ascii=False).encode()
    try:
        message = decode_message(data, timestamp=1, sender="P")
    except RemoteProtocolError:
        return
    assert encode_message(message) == data


@pytest.mark.parametrize(
    "kwargs",
    [
        {"operation": "upsert"},
        {"table": "no spaces"},
        {"entity_id": ""},
        {"values": {"a": [1]}},
        {"values": {"a": float("nan")}},
        {"values": {"a": 2**63}},
        {"operation": Operation.DELETE},
        {"operation": Operation.UPDATE, "values": {}},
        {"timestamp": -1},
        {"timestamp": 2**64},
        {"timestamp": True},
        {"sender": ""},
        {"values": {"a": "x" * MAX_MESSAGE_BYTES}},
    ],
)
def test_bad_local_construction_is_local_protocol_error(kwargs: dict[str, object]) -> None:
    fields: dict[str, object] = {
        "operation": Operation.UPSERT,
        "table": "t",
        "entity_id": "e",
        "values": {"a": 1},
        "timestamp": 1,
        "sender": "P",
    }
    fields.update(kwargs)
    with pytest.raises(LocalProtocolError):
        CrdtMessage(**fields)  # type: ignore[arg-type]


def test_message_is_immutable_and_equality_is_by_content() -> None:
    cells = {"a": 1}
    message = CrdtMessage(Operation.UPSERT, "t", "e", cells, timestamp=1, sender="P")
    cells["a"] = 2
    assert dict(message.values) == {"a": 1}
    same = CrdtMessage(Operation.UPSERT, "t", "e", {"a": 1}, timestamp=1, sender="P")
    as_bool = CrdtMessage(Operation.UPSERT, "t", "e", {"a": True}, timestamp=1, sender="P")
    as_float = CrdtMessage(Operation.UPSERT, "t", "e", {"a": 1.0}, timestamp=1, sender="P")
    assert message == same and hash(message) == hash(same)
    assert len({message, as_bool, as_float}) == 3
    other_time = CrdtMessage(Operation.UPSERT, "t", "e", {"a": 1}, timestamp=2, sender="P")
    assert message != other_time


@given(st.none() | st.booleans() | st.integers(INT64_MIN, INT64_MAX)
       | st.floats(allow_nan=False, allow_infinity=False) | st.text())
def test_value_text_is_compact_json(value: Value) -> None:
    assert value_text(value) == json.dumps(value, ensure_ascii=False, allow_nan=False)
