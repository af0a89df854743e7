"""Ranges and keys per Recon message (recon.max_message_ranges / max_message_keys): a reader
refuses more before it parses them, a writer never puts more in one message."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from sync.errors import RemoteProtocolError
from sync.recon.session import ReconConfig
from sync.recon.wire import KEYS, Limits, MessageWriter, decode_message

BIG = Limits(max_items=1 << 20, max_keys=1 << 20)
SMALL = dataclasses.replace(BIG, max_items=100, max_keys=300)


def _bounds(n: int) -> list[bytes]:
    return [b"k" + i.to_bytes(3, "big") for i in range(n + 1)]


def test_too_many_ranges_are_refused_before_parsing() -> None:
    writer = MessageWriter(BIG)
    bounds = _bounds(101)
    for lo, hi in itertools.pairwise(bounds):
        assert writer.try_hash(lo, hi, 1, bytes(16))
    data = writer.finish(more=False)
    assert len(decode_message(data, BIG).items) == 101
    with pytest.raises(RemoteProtocolError, match="more ranges"):
        decode_message(data, SMALL)


def test_too_many_keys_are_refused() -> None:
    writer = MessageWriter(BIG)
    bounds = _bounds(2)
    keys = [bounds[0] + i.to_bytes(2, "big") for i in range(1, 200)]
    assert writer.try_keys(KEYS, bounds[0], bounds[1], keys) == len(keys)
    more = [bounds[1] + i.to_bytes(2, "big") for i in range(1, 200)]
    assert writer.try_keys(KEYS, bounds[1], bounds[2], more) == len(more)
    data = writer.finish(more=False)
    with pytest.raises(RemoteProtocolError, match="more keys"):
        decode_message(data, SMALL)


def test_a_writer_keeps_to_the_limits() -> None:
    writer = MessageWriter(SMALL)
    bounds = _bounds(150)
    written = sum(writer.try_hash(lo, hi, 1, bytes(16))
                  for lo, hi in itertools.pairwise(bounds))
    assert written == SMALL.max_items
    assert len(decode_message(writer.finish(more=True), SMALL).items) == SMALL.max_items
    keys_writer = MessageWriter(SMALL)
    lo, hi = b"k", b"l"
    keys = [lo + i.to_bytes(2, "big") for i in range(1, 400)]
    assert keys_writer.try_keys(KEYS, lo, hi, keys) is None  # all or nothing


def test_config_keeps_a_split_and_a_key_list_within_one_message() -> None:
    with pytest.raises(Exception, match="max_message_ranges"):
        ReconConfig(max_message_ranges=100)
    with pytest.raises(Exception, match="max_message_keys"):
        ReconConfig(max_message_keys=100)
