"""Convergence under loss, reordering and duplication (hypothesis state machine).

2-8 participants send at random while the link drops up to 30% of copies, delays (reorders) and
duplicates them; then the link heals and timers run until the channel is quiet. Invariants:
identical logs, causal delivery, no duplicate delivery, every message acknowledged to its sender.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from sync.sds import SdsConfig
from tests.sync.sds.helpers import Network, Node

CFG = SdsConfig(
    resend_interval=2.0,
    possibly_acked_resend_interval=5.0,
    max_resends=100_000,
    lost_timeout=1e9,
    sync_interval=3.0,
    sync_jitter=3.0,
    t_min=1.0,
    t_max=5.0,
)


def check_causal_and_unique(node: Node) -> None:
    seen: set[str] = set()
    for d in node.delivered:
        assert d.message_id not in seen, "delivered twice"
        assert d.lost_dependency or all(h in seen for h in d.causal_history), "causal order"
        seen.add(d.message_id)


class Convergence(RuleBasedStateMachine):
    signed = False
    config = CFG

    @initialize(
        n=st.integers(2, 8),
        drop=st.floats(0.0, 0.3),
        dup=st.floats(0.0, 0.3),
        seed=st.integers(0, 2**32 - 1),
    )
    def setup(self, n: int, drop: float, dup: float, seed: int) -> None:
        self.net = Network(
            n, seed=seed, drop=drop, dup=dup, max_delay=2.0, config=self.config,
            signed=self.signed
        )
        self.count = 0

    @rule(who=st.integers(0, 7), size=st.integers(1, 32))
    def send(self, who: int, size: int) -> None:
        self.count += 1
        self.net.send(who % len(self.net.nodes), self.count.to_bytes(4, "big") * size)

    @rule(dt=st.floats(0.0, 15.0))
    def advance(self, dt: float) -> None:
        self.net.run_for(dt)

    @invariant()
    def causal_delivery(self) -> None:
        for node in self.net.nodes:
            check_causal_and_unique(node)

    def teardown(self) -> None:
        net = self.net
        net.drop = net.dup = 0.0
        assert net.run_until_quiet(max_seconds=3600.0), "did not converge"
        logs = [node.ch.layers.log.entries() for node in net.nodes]
        assert all(log == logs[0] for log in logs)
        assert len(logs[0]) == self.count
        for node in net.nodes:
            check_causal_and_unique(node)
            assert [
                (d.lamport, d.message_id)
                for d in sorted(node.delivered, key=lambda d: (d.lamport, d.message_id))
            ] == logs[0]
            assert set(node.sent) <= node.acked, "unacknowledged message"


class SignedConvergence(Convergence):
    signed = True


class WakuConvergence(Convergence):
    """The same guarantees on the @waku/sds wire: payload-hash ids, unsigned, its filter."""

    config = replace(CFG, profile="waku")


TestConvergence = Convergence.TestCase
TestConvergence.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
TestSignedConvergence = SignedConvergence.TestCase
TestSignedConvergence.settings = settings(max_examples=15, stateful_step_count=25, deadline=None)
TestWakuConvergence = WakuConvergence.TestCase
TestWakuConvergence.settings = settings(max_examples=50, stateful_step_count=40, deadline=None)
