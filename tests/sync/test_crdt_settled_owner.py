"""Settled table owners (docs/crdt.md "Settled owners"): honest replicas converge whatever order
they learn declarations in, and a declaration that arrives after the owner settled, however early
its timestamp, takes nothing over."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.crdt import Added, CrdtMessage, MemoryReplica, Operation, SchemaBook, SchemaDeclaration

SETTLE = 10_000
T0 = 1_700_000_000_000
HONEST = ["12D3KooWA", "12D3KooWB", "12D3KooWC"]
ATTACKER = "12D3KooWZ"
COLUMNS = {"name": "text", "n": "integer"}


def seed(sender: str, lamport: int, **kw: object) -> SchemaDeclaration:
    return SchemaDeclaration("users", dict(COLUMNS), None, lamport, sender, **kw)  # type: ignore[arg-type]


def backdated_takeover(lamport: int = 0) -> SchemaDeclaration:
    """The attack: the attacker as only writer, one column, stamped (or ``since``) early."""
    return SchemaDeclaration("users", {"name": "text"}, frozenset({ATTACKER}), lamport, ATTACKER,
                             backdated=True)


def test_a_backdated_declaration_after_settling_is_a_refused_takeover() -> None:
    book = SchemaBook(settle_ms=SETTLE)
    assert book.add(seed(HONEST[0], T0), now_ms=T0) is Added.CHANGED
    # Before the window closes the claim order decides (this is how concurrent seeds converge).
    early = book.copy()
    assert early.add(backdated_takeover(), now_ms=T0 + SETTLE - 1) is Added.RESCAN
    # After it, the owner is settled and the same declaration is refused.
    assert book.add(backdated_takeover(), now_ms=T0 + SETTLE) is Added.TAKEOVER
    history = book.history("users")
    assert history is not None and history.owner == HONEST[0]
    assert book.settled == {"users": HONEST[0]}
    # A later declaration by another sender never counted: it is not a takeover attempt.
    assert book.add(seed(HONEST[1], T0 + 5), now_ms=T0 + 2 * SETTLE) is Added.NOT_OWNER
    # The owner still publishes versions, late or not.
    newer = SchemaDeclaration("users", {**COLUMNS, "extra": "real"}, None, T0 + 50, HONEST[0])
    assert book.add(newer, now_ms=T0 + 3 * SETTLE) is Added.CHANGED


def test_a_config_pin_counts_an_earlier_declaration_as_a_takeover() -> None:
    book = SchemaBook(pins={"users": HONEST[0]})
    book.add(seed(HONEST[0], T0))
    assert book.add(backdated_takeover()) is Added.TAKEOVER
    assert book.add(seed(HONEST[1], T0 + 1)) is Added.NOT_OWNER


def test_the_settled_owner_survives_eviction_and_readmission() -> None:
    book = SchemaBook(settle_ms=SETTLE, max_tables=1)
    book.add(seed(HONEST[0], T0), now_ms=T0)
    book.settle(T0 + SETTLE)
    other = SchemaDeclaration("aaa", {"x": "text"}, None, 1, ATTACKER)
    assert book.add(other, now_ms=T0 + SETTLE) is Added.RESCAN  # evicts users (max_tables)
    # Out of the book, the table stays pinned: the attacker cannot re-admit it as its own.
    assert book.add(backdated_takeover(), now_ms=T0 + SETTLE) is Added.NOT_OWNER
    assert "users" not in book


honest_seed = st.tuples(st.sampled_from(HONEST), st.integers(0, SETTLE // 4))


@settings(max_examples=150, deadline=None)
@given(
    seeds=st.lists(honest_seed, min_size=1, max_size=6),
    versions=st.lists(st.integers(1, 1000), max_size=4),
    attack_at=st.integers(0, T0),
    replicas=st.lists(st.randoms(use_true_random=False), min_size=2, max_size=3),
    delays=st.lists(st.integers(0, SETTLE // 2), min_size=12, max_size=12),
)
def test_honest_replicas_converge_and_refuse_the_late_takeover(
        seeds: list[tuple[str, int]], versions: list[int], attack_at: int,
        replicas: list[object], delays: list[int]) -> None:
    """Honest nodes seed the table together (within a quarter window of each other) and its
    owner later adds versions; every replica learns these in its own order, each within half a
    window of the first it saw, plus writes. An attacker's declaration, backdated to any time
    from 0 on (so it would win the claim order), arrives once the window has passed since each
    replica first saw the table.
    All replicas end with the same owner (the first honest claim), versions and rows."""
    honest = [seed(sender, T0 + offset) for sender, offset in seeds]
    owner = min(honest, key=lambda d: d.identity).sender
    later = [SchemaDeclaration("users", {**COLUMNS, f"c{v}": "integer"}, None,
                               T0 + SETTLE + v, owner) for v in versions]
    writes = [CrdtMessage(Operation.UPSERT, "users", f"e{k}", {"name": f"v{k}", "n": k},
                          T0 + SETTLE * 3 + k, HONEST[k % 3]) for k in range(5)]
    attack = backdated_takeover(attack_at)
    results = []
    for rng in replicas:
        replica = MemoryReplica(settle_ms=SETTLE)
        order: list[SchemaDeclaration | CrdtMessage] = [*honest, *later, *writes]
        rng.shuffle(order)  # type: ignore[attr-defined]
        now = T0 + SETTLE // 4
        for i, item in enumerate(order):
            replica.apply(item, now_ms=now + delays[i % len(delays)])
        replica.apply(attack, now_ms=now + SETTLE + SETTLE // 2)
        assert replica.counters["schema_takeover"] == 1
        book = replica.schemas
        assert isinstance(book, SchemaBook)
        history = book.history("users")
        assert history is not None and history.owner == owner
        results.append((history.timeline, replica.tables(), replica.state()))
    assert all(r == results[0] for r in results)
    assert len(results[0][1]["users"]) == 5  # every honest row stays


@settings(max_examples=100, deadline=None)
@given(st.lists(honest_seed, min_size=1, max_size=6), st.randoms(use_true_random=False))
def test_without_settling_the_book_is_a_function_of_the_set(
        seeds: list[tuple[str, int]], rng: object) -> None:
    honest = [seed(sender, T0 + offset) for sender, offset in seeds] + [backdated_takeover()]
    shuffled = list(honest)
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    a, b = SchemaBook(honest, settle_ms=None), SchemaBook(settle_ms=None)
    for d in shuffled:
        b.add(d, now_ms=T0 + 10 * SETTLE)  # ignored without settle_ms
    assert a.history("users").timeline == b.history("users").timeline  # type: ignore[union-attr]
