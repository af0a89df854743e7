"""The rolling bloom filter and the reading of received filters."""

from __future__ import annotations

import random

import mmh3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import RemoteProtocolError
from sync.sds import BloomParams, BloomView, RollingBloomFilter, SdsConfig, bloom_indices
from sync.sds.bloom import index_mask


def test_default_parameters_meet_the_targets() -> None:
    cfg = SdsConfig()
    params = BloomParams.optimal(cfg.bloom_capacity, cfg.bloom_fp_rate)
    assert params.nbytes <= 2048
    assert params.false_positive_rate(1000) <= 0.01
    # k is optimal for m/n: one hash more or less is worse.
    for k in (params.hashes - 1, params.hashes + 1):
        assert BloomParams(params.bits, k).false_positive_rate(1000) > (
            params.false_positive_rate(1000)
        )


def test_rolling_window_keeps_exactly_the_recent_ids_and_meets_the_fp_rate() -> None:
    params = BloomParams.optimal(1000, 0.01)
    bloom = RollingBloomFilter(params, 1000)
    for i in range(5000):
        bloom.add(f"id-{i}")
    assert len(bloom) == 1000
    assert all(f"id-{i}" in bloom for i in range(4000, 5000))
    # Old ids and never-added ids are both "foreign" now: measure the false-positive rate.
    foreign = [f"other-{i}" for i in range(20_000)] + [f"id-{i}" for i in range(3000)]
    fp = sum(x in bloom for x in foreign) / len(foreign)
    assert fp <= 0.013  # 1% design rate plus sampling noise


def test_filter_bytes_are_readable_by_a_view() -> None:
    params = BloomParams.optimal(100, 0.01)
    bloom = RollingBloomFilter(params, 100)
    for i in range(100):
        bloom.add(str(i))
    view = BloomView(bloom.to_bytes(), params, max_bits=1 << 20)
    assert all(view.contains_indices(bloom_indices(str(i), params)) for i in range(100))
    assert 0 < view.false_positive_rate < 0.02


def test_view_rejects_inconsistent_parameters() -> None:
    with pytest.raises(RemoteProtocolError):
        BloomView(b"\x00" * 3, BloomParams(16, 2), max_bits=1 << 20)
    with pytest.raises(RemoteProtocolError):
        BloomView(b"\x00" * 2, BloomParams(16, 0), max_bits=1 << 20)
    with pytest.raises(RemoteProtocolError):
        BloomView(b"\x00" * 2, BloomParams(16, 2), max_bits=8)


def test_hits_needed_for_promotion_follow_from_the_parameters() -> None:
    params = BloomParams.optimal(1000, 0.01)
    assert params.hits_needed(1000, 1e-6) == 3  # 1% ** 3 = 1e-6
    assert params.hits_needed(1000, 1e-7) == 4
    assert params.hits_needed(10, 1e-6) == 1  # a sparse filter is strong evidence


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=80), st.integers(1, 1 << 40), st.integers(1, 30))
def test_bit_positions_are_the_documented_double_hashing(mid: str, bits: int,
                                                         hashes: int) -> None:
    """``bloom_indices`` (computed from mmh3's two 64-bit words, reduced mod m first: the
    receive path's fast form) gives exactly docs/sds.md's positions: (h1 + i*h2) mod m of
    MurmurHash3 x86 128-bit, h1 its low and h2 its high 64 bits."""
    h = mmh3.hash128(mid.encode("utf-8", "surrogatepass"), 0, False)
    h1, h2 = h & ((1 << 64) - 1), h >> 64
    expected = tuple((h1 + i * h2) % bits for i in range(hashes))
    assert bloom_indices(mid, BloomParams(bits, hashes)) == expected


@settings(max_examples=200)
@given(st.integers(min_value=1, max_value=2_000), st.integers(min_value=1, max_value=16),
       st.randoms(use_true_random=False), st.lists(st.text(min_size=1, max_size=8), max_size=40))
def test_a_mask_test_answers_as_the_bit_test(bits: int, hashes: int, rnd: random.Random,
                                             ids: list[str]) -> None:
    """The acknowledgement review's integer-AND test (``contains_mask``) gives the same answer
    as reading the bits (``contains_indices``), for ids added and not added, any geometry."""
    params = BloomParams(bits, hashes)
    data = bytearray(params.nbytes)
    for mid in ids[: len(ids) // 2]:  # half the ids set, then random noise bits
        for i in bloom_indices(mid, params):
            data[i >> 3] |= 0x80 >> (i & 7)
    for _ in range(rnd.randrange(bits // 4 + 1)):
        i = rnd.randrange(bits)
        data[i >> 3] |= 0x80 >> (i & 7)
    view = BloomView(bytes(data), params, max_bits=2_000)
    for mid in ids:
        indices = bloom_indices(mid, params)
        assert view.contains_mask(index_mask(indices, params)) == view.contains_indices(indices)
