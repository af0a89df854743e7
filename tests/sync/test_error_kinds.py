"""Typed error kinds (sync.errors.ErrorKind): penalties and metric labels follow from the kind,
never from parsing the reason text."""

from __future__ import annotations

import pickle

from sync.errors import ErrorKind, RemoteProtocolError
from sync.ingest import IngestSpec, verify_wires
from sync.peerscore import DEFAULT_WEIGHTS, KIND_PENALTIES, penalty_of
from sync.sds import encode_event
from tests.sync.sds.helpers import channel, key


def test_every_kind_has_a_known_penalty_and_a_distinct_label() -> None:
    assert set(KIND_PENALTIES) == set(ErrorKind)
    assert all(p in DEFAULT_WEIGHTS for p in KIND_PENALTIES.values())
    assert len({k.value for k in ErrorKind}) == len(ErrorKind)


def test_the_penalty_does_not_depend_on_the_reason_text() -> None:
    # A reason text that reads like a cheap policy refusal cannot lower what a bad signature
    # costs (the old prefix table did exactly that: the text decided).
    exc = RemoteProtocolError("lamport too far ahead (really a forged signature)",
                              kind=ErrorKind.BAD_SIGNATURE)
    assert penalty_of(exc.kind) == "invalid_event"
    assert RemoteProtocolError("bad signature").kind is ErrorKind.MALFORMED


def test_kind_and_count_survive_attribution_and_pickling() -> None:
    exc = RemoteProtocolError("3 bad", None, ErrorKind.INVALID_EVENTS, 3)
    moved = exc.from_peer("peer-a", "batch: ")
    assert (moved.reason, moved.peer, moved.kind, moved.count) == (
        "batch: 3 bad", "peer-a", ErrorKind.INVALID_EVENTS, 3)
    back = pickle.loads(pickle.dumps(moved))
    assert (back.reason, back.peer, back.kind, back.count) == (
        moved.reason, moved.peer, moved.kind, moved.count)


def test_verified_batches_carry_the_kind_of_each_rejection() -> None:
    good = encode_event("general", channel(1).setup.participant_id, 5, (), b"x", key(1)).wire
    forged = bytearray(good)
    forged[-1] ^= 1
    out = verify_wires(IngestSpec(network_id=1), [good, bytes(forged), b"\xff\xff"])
    assert set(out.rejected) == {1, 2}
    assert out.rejected_kinds[2] is ErrorKind.UNDECODABLE
    assert penalty_of(out.rejected_kinds[1]) == "invalid_event"
