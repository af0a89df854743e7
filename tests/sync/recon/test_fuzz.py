"""Decoder and session fuzz: arbitrary or mutated bytes only ever raise RemoteProtocolError."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sync.errors import RemoteProtocolError
from sync.recon import MemoryKeyStore, ReconConfig, ReconSession, parse_event_id
from sync.recon.wire import Limits, decode_message
from tests.sync.recon.helpers import FULL, make_sets

CONFIG = ReconConfig(max_message_bytes=8192, max_key_bytes=64)


def _sessions() -> tuple[ReconSession, ReconSession]:
    a_keys, b_keys = make_sets(11, "overlap", 200)
    a = MemoryKeyStore.from_sorted(sorted(a_keys))
    b = MemoryKeyStore.from_sorted(sorted(b_keys))
    interests_b = [(b"\x10", b"\xe0")]
    return ReconSession.initiator(a, FULL, CONFIG), ReconSession.responder(b, interests_b, CONFIG)


def _record() -> list[bytes]:
    ini, res = _sessions()
    messages = [ini.start()]
    sides = (res, ini)
    while True:
        reply = sides[(len(messages) - 1) % 2].receive(messages[-1])
        if reply is None:
            return messages
        messages.append(reply)


MESSAGES = _record()


def _deliver(index: int, data: bytes) -> bytes | None:
    ini, res = _sessions()
    ini.start()
    sides = (res, ini)
    for i in range(index):
        sides[i % 2].receive(MESSAGES[i])
    return sides[index % 2].receive(data)


def test_recorded_exchange_is_long_enough_to_fuzz() -> None:
    assert len(MESSAGES) >= 4


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=300))
def test_decoder_arbitrary_bytes(data: bytes) -> None:
    try:
        message = decode_message(data, Limits())
    except RemoteProtocolError as exc:
        assert exc.reason
        return
    assert all(item.lo < item.hi for item in message.items)


@settings(deadline=None, max_examples=200)
@given(st.binary(max_size=120))
def test_event_id_parser_arbitrary_bytes(data: bytes) -> None:
    try:
        parsed = parse_event_id(data)
    except RemoteProtocolError:
        return
    assert parsed.to_bytes() == data


mutation_st = st.lists(
    st.tuples(
        st.sampled_from(["flip", "set", "cut", "insert", "delete"]),
        st.integers(0, 10**6),
        st.integers(0, 255),
    ),
    min_size=1,
    max_size=4,
)


def _mutate(data: bytes, mutations: list[tuple[str, int, int]]) -> bytes:
    out = bytearray(data)
    for op, where, value in mutations:
        pos = where % (len(out) + 1)
        if op == "flip" and pos < len(out):
            out[pos] ^= 1 << (value % 8)
        elif op == "set" and pos < len(out):
            out[pos] = value
        elif op == "cut":
            del out[pos:]
        elif op == "insert":
            out[pos:pos] = bytes([value])
        elif op == "delete" and pos < len(out):
            del out[pos]
    return bytes(out)


@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, 10**6), mutations=mutation_st)
def test_mutated_messages_only_raise_remote_protocol_error(
    index: int, mutations: list[tuple[str, int, int]]
) -> None:
    index %= len(MESSAGES)
    data = _mutate(MESSAGES[index], mutations)
    try:
        reply = _deliver(index, data)
    except RemoteProtocolError as exc:
        assert exc.reason
        return
    assert reply is None or isinstance(reply, bytes)


@pytest.mark.parametrize("index", range(3))
def test_truncated_messages_are_rejected(index: int) -> None:
    data = MESSAGES[index % len(MESSAGES)]
    step = max(1, len(data) // 150)
    for cut in range(0, len(data), step):
        with pytest.raises(RemoteProtocolError):
            decode_message(data[:cut], CONFIG.limits)
    assert decode_message(data, CONFIG.limits).items or index == len(MESSAGES) - 1
