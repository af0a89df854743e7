"""On the default settings, the structures a node keeps per event in memory are full at a few
MiB, whatever the log's length (docs/ops/README.md "Memory"). They were 100,000 delivered ids
(~20 MiB) and 131,072 cached Recon keys (~26 MiB), which a node under steady load filled for
half an hour and more: its memory rose over every life the chaos bench measured."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from node.config.settings import ReconSection
from node.replication.recon_summary import keystore_limits
from tests.harness.inproc import InProcessNode
from tests.sync.recon.helpers import Answered, ListReader

MIB = 1 << 20


def _deep_size(obj: object) -> int:
    """Bytes of ``obj`` and everything it holds (containers, bytes, ints), each counted once."""
    seen: set[int] = set()
    stack, total = [obj], 0
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return total


def test_a_node_on_the_defaults_keeps_at_most_ten_thousand_delivered_ids(tmp_path: Path) -> None:
    node = InProcessNode(tmp_path / "n").start()
    try:
        with node.client(timeout=120) as client:
            for batch in range(12):
                events = [{"content": f"e {batch} {i}"} for i in range(1_000)]
                client.post("/v1/channels/general/events",
                            json={"events": events}).raise_for_status()
        (channel,) = [c for c in node.get("/v1/channels")["channels"]
                      if c["channel"] == "general"]
        assert channel["delivered"] == 12_000
        assert channel["delivered_in_memory"] == 10_000
    finally:
        node.kill()


def test_the_recon_key_cache_on_the_defaults_holds_a_few_mib() -> None:
    load, max_buckets, cache_keys = keystore_limits(ReconSection())
    store = Answered(ListReader(), load=load, max_buckets=max_buckets, cache_keys=cache_keys)
    rng = random.Random(7)
    keys = sorted({rng.randbytes(40) for _ in range(40_000)})
    store.insert_many(keys)
    # Range hashes whose bounds fall in every bucket: each read bucket is cached.
    for lo, hi in zip(keys[50::100], keys[150::100], strict=False):
        store.range_hash(lo, hi)
    cached = store._cached
    assert 0 < cached <= 16_384
    assert _deep_size(store._cache) < 4 * MIB
