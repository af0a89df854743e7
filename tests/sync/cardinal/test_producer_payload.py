"""Producer determinism and counting; payload JSON / JSONL round trips and errors."""

from __future__ import annotations

import json

import pytest

from sync.cardinal import (
    Batch,
    BatchMsg,
    Limits,
    PrefixRouter,
    Producer,
    decode_message,
    iter_payloads_jsonl,
    make_payload,
    payload_from_json,
    payload_to_json,
    prefix_to_channel,
)
from sync.errors import LocalProtocolError, RemoteProtocolError
from tests.sync.cardinal.helpers import ROUTES, block, h, producer

A = block("A", 0, None)
B = block("B", 1, A, extra=5)


def test_redundant_producers_emit_identical_sorted_messages() -> None:
    first = producer().messages_for(B)
    # A payload built from the same content in another order is equal, and so are its messages.
    rebuilt = make_payload(
        B.hash,
        B.number,
        B.parent,
        B.weight,
        dict(reversed(B.updates)),
        reversed(B.deletes),
        reversed(B.sub_batches),
    )
    assert rebuilt == B
    assert producer().messages_for(rebuilt) == first
    assert [m.key for m in first] == sorted(m.key for m in first)
    assert first[0].key == b"\x00" + B.hash


def test_counts_per_prefix_and_inline_entries() -> None:
    msgs = producer().messages_for(B)
    batch = decode_message(msgs[0].key, msgs[0].value)
    assert isinstance(batch, Batch)
    # foo/ counts 1 item + 5 extra + 1 delete; bar/1/baz/ is a regex prefix; plain keys inline.
    assert batch.counts == {"foo/": 7, "bar/1/baz/": 1}
    assert batch.values == {"plain/B": b"inline"}
    assert batch.deletes == {"plain-del/B"}
    assert batch.subbatches == {"state/": B.sub_batches[0].id}
    channels = {m.channel for m in msgs if isinstance(decode_message(m.key, m.value), BatchMsg)}
    assert channels == {"foo", "bar"}
    assert {m.channel for m in msgs if m.key[0] in (1, 2)} == {"state"}
    assert msgs[0].channel == "default"


def test_overlapping_prefixes_are_refused() -> None:
    prod = Producer(PrefixRouter(["a/b/", "a/"]))
    with pytest.raises(LocalProtocolError, match="overlap"):
        prod.messages_for(make_payload(h("x"), 1, h("p"), 1, {"a/1": b"", "a/b/2": b""}))


def test_router_helpers() -> None:
    r = prefix_to_channel(ROUTES, "default")
    assert r.route("bar/7/baz/q") == ("bar/7/baz/", "bar")
    assert r.route("other") == (None, "default")
    assert r.channels() == ("bar", "default", "foo", "state")
    with pytest.raises(LocalProtocolError):
        PrefixRouter(["("])


def test_payload_json_round_trip() -> None:
    obj = payload_to_json(B)
    assert payload_from_json(json.loads(json.dumps(obj))) == B
    assert obj["hash"] == "0x" + B.hash.hex() and obj["weight"] == "1"


def test_payload_json_defaults() -> None:
    p = payload_from_json({"hash": "0x" + "11" * 32, "number": 9, "parent": "0x" + "00" * 32})
    assert (p.weight, p.updates, p.deletes, p.sub_batches) == (9, (), (), ())
    big = payload_from_json(
        {"hash": "0x" + "11" * 32, "number": 1, "parent": "0x" + "00" * 32, "weight": str(2**200)}
    )
    assert big.weight == 2**200


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([], "expected a JSON object"),
        ({"number": 1, "parent": "0x" + "00" * 32}, "missing field 'hash'"),
        ({"hash": "0x12", "number": 1, "parent": "0x" + "00" * 32}, "hash: expected 32 bytes"),
        ({"hash": "0x" + "zz" * 32, "number": 1, "parent": "0x" + "00" * 32}, "hash: invalid hex"),
        (
            {"hash": "0x" + "11" * 32, "number": -1, "parent": "0x" + "00" * 32},
            "number: out of range",
        ),
        ({"hash": "0x" + "11" * 32, "number": True, "parent": "0x" + "00" * 32}, "number"),
        (
            {"hash": "0x" + "11" * 32, "number": 1, "parent": "0x" + "00" * 32, "extra": 1},
            "unknown field",
        ),
        (
            {
                "hash": "0x" + "11" * 32,
                "number": 1,
                "parent": "0x" + "00" * 32,
                "updates": {"k": "v"},
            },
            "updates['k']",
        ),
        (
            {"hash": "0x" + "11" * 32, "number": 1, "parent": "0x" + "00" * 32, "deletes": "k"},
            "deletes",
        ),
        (
            {
                "hash": "0x" + "11" * 32,
                "number": 1,
                "parent": "0x" + "00" * 32,
                "sub_batches": [{"name": "s", "id": "0x" + "00" * 32}],
            },
            "must not be all zeros",
        ),
    ],
)
def test_payload_json_errors_name_the_field(obj: object, message: str) -> None:
    with pytest.raises(RemoteProtocolError, match=message.replace("[", r"\[").replace("(", r"\(")):
        payload_from_json(obj)


def test_jsonl_errors_carry_the_line_number() -> None:
    good = json.dumps(payload_to_json(B))
    assert list(iter_payloads_jsonl([good, "", good])) == [B, B]
    with pytest.raises(RemoteProtocolError) as err:
        list(iter_payloads_jsonl([good, "{not json"], source="blocks.jsonl"))
    assert err.value.reason.startswith("line 2: invalid JSON") and err.value.peer == "blocks.jsonl"
    with pytest.raises(RemoteProtocolError, match="line 1: number"):
        list(
            iter_payloads_jsonl(
                ['{"hash": "0x' + "11" * 32 + '", "number": "x", "parent": "0x' + "00" * 32 + '"}']
            )
        )


def test_jsonl_hostile_input_is_a_remote_protocol_error() -> None:
    base = '{"hash": "0x' + "11" * 32 + '", "parent": "0x' + "00" * 32 + '", '
    hostile = [
        base + '"number": 1' + "0" * 5000 + "}",  # beyond Python's int digit limit
        "[" * 100_000 + "]" * 100_000,  # nesting beyond the recursion limit
        base + '"number": 1, "updates": {"\\ud800": "0x00"}}',  # lone surrogate key
        base + '"number": 1e400}',
        "null",
    ]
    for line in hostile:
        with pytest.raises(RemoteProtocolError, match="line 1"):
            list(iter_payloads_jsonl([line]))


def test_producer_refuses_what_consumers_would_reject() -> None:
    prod = Producer(PrefixRouter(["k/"]), limits=Limits(max_key=50, max_value=10))
    with pytest.raises(LocalProtocolError, match="limits"):
        prod.messages_for(make_payload(h("x"), 1, h("p"), 1, {"k/" + "x" * 20: b""}))
    with pytest.raises(LocalProtocolError, match="limits"):
        prod.messages_for(make_payload(h("x"), 1, h("p"), 1, {"k/a": b"x" * 11}))
    with pytest.raises(LocalProtocolError, match="UTF-8"):
        producer().messages_for(make_payload(h("x"), 1, h("p"), 1, {"foo/\ud800": b""}))
    with pytest.raises(LocalProtocolError):
        producer().messages_for(make_payload(h("x"), 1, h("p"), 1, {"inline\ud800": b""}))
