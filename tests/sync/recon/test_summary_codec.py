"""A saved summary restores an identical key store; the decoder refuses every damaged form."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import RemoteProtocolError
from sync.recon import (
    BucketSummary,
    MemoryKeyStore,
    SummaryKeyStore,
    decode_summary,
    encode_summary,
    wide_of,
)
from sync.recon.summary_codec import max_summary_bytes
from tests.sync.recon.helpers import Answered, BruteForceStore, CommittedFirst, ListReader, Query
from tests.sync.recon.test_summary import _same, keys_st, query_st


def _export(store: SummaryKeyStore | Answered) -> bytes:
    s = store.summary
    return encode_summary(s.load, s.starts, s.counts, s.wides)


def _import(blob: bytes, source: ListReader, *, load: int, max_buckets: int) -> Answered:
    saved = decode_summary(blob, max_buckets=max_buckets, max_key_bytes=8)
    summary = BucketSummary.restore(saved.buckets, load=max(load, saved.load),
                                    max_buckets=max_buckets)
    return Answered(source, summary, cache_keys=16)


@settings(deadline=None, max_examples=120)
@given(
    initial=st.lists(keys_st, max_size=300),
    later=st.lists(keys_st, max_size=100),
    queries=query_st,
    load=st.integers(1, 8),
    max_buckets=st.integers(2, 12),
)
def test_export_import_gives_an_identical_store(
    initial: list[bytes], later: list[bytes], queries: list[Query], load: int, max_buckets: int
) -> None:
    """Saved after any inserts (splits, merges), restored, then more keys committed first and
    inserted as the node's start-up replays them: the same answers as MemoryKeyStore."""
    source = CommittedFirst()
    saved = Answered(source, load=load, max_buckets=max_buckets, cache_keys=8)
    memory = MemoryKeyStore(load=load)
    model = BruteForceStore()
    for key in initial:
        if ListReader.add(source, key):  # committed, then accounted (once) as the node does
            saved.insert(key)
            memory.insert(key)
            model.insert(key)
    blob = _export(saved)
    restored = _import(blob, source, load=load, max_buckets=max_buckets)
    assert restored.summary.starts == saved.summary.starts
    assert restored.summary.counts == saved.summary.counts
    assert restored.summary.wides == saved.summary.wides
    assert restored.summary.load == saved.summary.load
    _same(restored, memory, model, queries)
    fresh = list(dict.fromkeys(k for k in later if not model.contains(k)))
    for key in fresh:
        ListReader.add(source, key)
    restored.insert_many(fresh)
    for key in fresh:
        memory.insert(key)
        model.insert(key)
    _same(restored, memory, model, queries)
    assert len(restored) == len(model)
    assert _export(restored) == _export(_import(_export(restored), source, load=load,
                                                 max_buckets=max_buckets))


def _store(n: int = 100) -> Answered:
    store = Answered(ListReader(), load=4, max_buckets=64)
    store.insert_many(i.to_bytes(2, "big") for i in range(n))
    return store


def _reencoded(blob: bytes, change: int, value: bytes) -> bytes:
    """``blob`` with bytes at ``change`` replaced and its digest made right again."""
    import hashlib

    body = bytearray(blob[:-32])
    body[change : change + len(value)] = value
    return bytes(body) + hashlib.sha256(bytes(body)).digest()


def test_decoder_refuses_damaged_summaries() -> None:
    blob = _export(_store())
    decode = lambda b, **kw: decode_summary(  # noqa: E731
        b, max_buckets=kw.get("max_buckets", 64), max_key_bytes=8)
    assert decode(blob).total == 100
    bad = {
        "digest": blob[:-1] + bytes([blob[-1] ^ 1]),
        "flipped body byte": blob[:10] + bytes([blob[10] ^ 1]) + blob[11:],
        "truncated": blob[:-40] + blob[-32:],
        "empty": b"",
        "magic": _reencoded(blob, 0, b"XSUM"),
        "version": _reencoded(blob, 4, b"\x02"),
        "load 0": _reencoded(blob, 5, b"\x00"),
        "trailing": _reencoded(blob, len(blob) - 32, b"\x00"),
    }
    for name, data in bad.items():
        with pytest.raises(RemoteProtocolError):
            decode(data)
        assert name
    huge_load = encode_summary(1 << 33, [b""], [1], [wide_of(b"k")])
    with pytest.raises(RemoteProtocolError, match="load"):
        decode(huge_load)
    with pytest.raises(RemoteProtocolError, match="longer than its limit"):
        decode(blob, max_buckets=2)
    assert len(blob) <= max_summary_bytes(64, 8)


def test_decoder_checks_order_counts_and_hash_ranges() -> None:
    wide = wide_of(b"k")
    two = [(b"", 1, wide), (b"m", 1, wide_of(b"z"))]

    def enc(buckets: list[tuple[bytes, int, int]]) -> bytes:
        return encode_summary(4, [b[0] for b in buckets], [b[1] for b in buckets],
                              [b[2] for b in buckets])

    decode_summary(enc(two), max_buckets=4, max_key_bytes=8)
    cases = {
        "first start not empty": [(b"a", 1, wide)],
        "not ascending": [(b"", 1, wide), (b"m", 1, wide), (b"m", 1, wide)],
        "start too long": [(b"", 1, wide), (b"123456789", 1, wide)],
        "sum over count": [(b"", 1, wide * 2)],
        "sum with no key": [(b"", 0, wide)],
    }
    for name, buckets in cases.items():
        with pytest.raises(RemoteProtocolError):
            decode_summary(enc(buckets), max_buckets=4, max_key_bytes=8)
        assert name
    # A total that the counts do not add up to (header: magic, version, load, buckets, total).
    blob = enc(two)
    with pytest.raises(RemoteProtocolError, match="add up"):
        decode_summary(_reencoded(blob, 7, b"\x03"), max_buckets=4, max_key_bytes=8)
    # The carry halves of a lane slot count too: a slot one over count * (2^32 - 1).
    slots = list(struct.unpack("<16I", wide.to_bytes(64, "little")))
    slots[0:2] = [0xFFFFFFFF, 1]
    over = int.from_bytes(struct.pack("<16I", *slots), "little")
    with pytest.raises(RemoteProtocolError, match="out of range"):
        decode_summary(enc([(b"", 1, over)]), max_buckets=4, max_key_bytes=8)
