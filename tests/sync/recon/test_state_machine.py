"""Hypothesis state machine: nodes add keys and reconcile pairwise with random interests."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from sync.recon import MemoryKeyStore, ReconConfig, intersect, normalize, reconcile_in_memory
from tests.sync.recon.helpers import FULL

NODES = 3
interest_st = st.one_of(
    st.just(FULL),
    st.lists(
        st.tuples(st.binary(max_size=1), st.binary(min_size=1, max_size=1)).filter(
            lambda r: r[0] < r[1]
        ),
        min_size=1,
        max_size=2,
    ).map(tuple),
)


class ReconNodes(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.stores = [MemoryKeyStore(load=4) for _ in range(NODES)]
        self.models: list[set[bytes]] = [set() for _ in range(NODES)]
        self.config = ReconConfig(fanout=4, key_list_threshold=2)

    @rule(node=st.integers(0, NODES - 1), keys=st.lists(st.binary(min_size=1, max_size=3)))
    def add(self, node: int, keys: list[bytes]) -> None:
        for key in keys:
            assert self.stores[node].insert(key) == (key not in self.models[node])
            self.models[node].add(key)

    @rule(
        a=st.integers(0, NODES - 1),
        b=st.integers(0, NODES - 1),
        interests_a=interest_st,
        interests_b=interest_st,
    )
    def sync(
        self,
        a: int,
        b: int,
        interests_a: tuple[tuple[bytes, bytes], ...],
        interests_b: tuple[tuple[bytes, bytes], ...],
    ) -> None:
        if a == b:
            return
        reconcile_in_memory(self.stores[a], self.stores[b], interests_a, interests_b, self.config)
        common = intersect(normalize(interests_a), normalize(interests_b))
        shared = {
            k for k in self.models[a] | self.models[b] if any(lo <= k < hi for lo, hi in common)
        }
        self.models[a] |= shared
        self.models[b] |= shared
        for lo, hi in common:
            assert self.stores[a].range_hash(lo, hi) == self.stores[b].range_hash(lo, hi)

    @invariant()
    def stores_hold_exactly_the_model(self) -> None:
        for store, model in zip(self.stores, self.models, strict=True):
            assert len(store) == len(model)
            assert set(store.keys(b"", b"\xff" * 8, 10**6)) == model


TestReconNodes = ReconNodes.TestCase
TestReconNodes.settings = settings(max_examples=40, stateful_step_count=20, deadline=None)
