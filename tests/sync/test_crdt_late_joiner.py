"""Table owners on late joiners (docs/crdt.md "Claims are dated by their events").

A claim to own a table is dated by the Lamport time of the event that carries it; ``since``
dates a version only. So the issue-28 takeover (a declaration signed now with ``since: 0``,
naming the attacker the only writer) loses the claim order on every replica, whatever it had
settled and whenever it joined: early replicas that learn everything over time and settle, late
joiners fed the whole log at once (with or without a settle window), in any order. A claim signed
with an early *event* time is told apart by nobody but a node's own receipt clock (settling) or
its config (``db.owners``): with a pin every replica refuses it, early or late.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.crdt import Added, CrdtMessage, MemoryReplica, Operation, SchemaBook, SchemaDeclaration

SETTLE = 10_000
T0 = 1_700_000_000_000
HONEST = ["12D3KooWA", "12D3KooWB", "12D3KooWC"]
ATTACKERS = ["12D3KooWY", "12D3KooWZ"]
COLUMNS = {"name": "text", "n": "integer"}

Item = SchemaDeclaration | CrdtMessage


def seed(sender: str, lamport: int) -> SchemaDeclaration:
    return SchemaDeclaration("users", dict(COLUMNS), None, lamport, sender)


def backdated(attacker: str, since: int, signed_at: int) -> SchemaDeclaration:
    """The attack of issue 28: signed at ``signed_at``, ``since`` early, the attacker as the
    only writer, one column fewer."""
    return SchemaDeclaration("users", {"name": "text"}, frozenset({attacker}), since, attacker,
                             backdated=True, claimed_at=signed_at)


def rows(k: int) -> list[CrdtMessage]:
    return [CrdtMessage(Operation.UPSERT, "users", f"e{i}", {"name": f"v{i}", "n": i},
                        T0 + 3 * SETTLE + i, HONEST[i % 3]) for i in range(k)]


def outcome(replica: MemoryReplica) -> tuple[object, ...]:
    book = replica.schemas
    assert isinstance(book, SchemaBook)
    history = book.history("users")
    assert history is not None
    return history.owner, history.timeline, replica.tables(), replica.state()


def early_replica(honest: list[Item], attacks: list[SchemaDeclaration], rng: random.Random,
                  delays: list[int], attack_delays: list[int]) -> MemoryReplica:
    """Learns the honest items within half a window of each other, and the attacks whenever
    from the first of those on (inside its window or long after): the settle assumption is
    only that the honest seeds reach a live replica within ``settle_ms`` of each other."""
    replica = MemoryReplica(settle_ms=SETTLE)
    timed = [(T0 + SETTLE // 4 + delays[i % len(delays)], rng.random(), item)
             for i, item in enumerate(honest)]
    timed += [(T0 + SETTLE // 4 + attack_delays[i % len(attack_delays)], rng.random(), item)
              for i, item in enumerate(attacks)]
    for at, _, item in sorted(timed, key=lambda t: (t[0], t[1])):
        replica.apply(item, now_ms=at)
    return replica


def late_joiner(log: list[Item], rng: random.Random, settle: int | None,
                pins: dict[str, str] | None = None) -> MemoryReplica:
    """Fed the whole log at once (Recon catch-up, a snapshot), in any order."""
    replica = MemoryReplica(settle_ms=settle, pins=pins)
    items = list(log)
    rng.shuffle(items)
    now = T0 + 100 * SETTLE
    for item in items:
        replica.apply(item, now_ms=now)
    return replica


honest_seed = st.tuples(st.sampled_from(HONEST), st.integers(0, SETTLE // 4))


@settings(max_examples=60, deadline=None)
@given(
    seeds=st.lists(honest_seed, min_size=1, max_size=5),
    versions=st.lists(st.integers(1, 1000), max_size=3),
    attacks=st.lists(st.tuples(st.sampled_from(ATTACKERS), st.integers(0, T0),
                               st.integers(1, 50 * SETTLE)), min_size=1, max_size=3),
    seeds_rng=st.lists(st.randoms(use_true_random=False), min_size=4, max_size=4),
    delays=st.lists(st.integers(0, SETTLE // 2), min_size=8, max_size=8),
    attack_delays=st.lists(st.integers(0, 40 * SETTLE), min_size=3, max_size=3),
)
def test_backdated_claims_lose_on_every_replica_however_late_it_joined(
        seeds: list[tuple[str, int]], versions: list[int],
        attacks: list[tuple[str, int, int]], seeds_rng: list[random.Random],
        delays: list[int], attack_delays: list[int]) -> None:
    honest_decls = [seed(sender, T0 + offset) for sender, offset in seeds]
    owner = min(honest_decls, key=lambda d: d.claim).sender
    later = [SchemaDeclaration("users", {**COLUMNS, f"c{v}": "integer"}, None,
                               T0 + SETTLE + v, owner) for v in versions]
    honest: list[Item] = [*honest_decls, *later, *rows(6)]
    # Signed any time after the first honest claim, backdated with since to anything earlier.
    first = min(d.claimed for d in honest_decls)
    forged = [backdated(who, min(since, first + signed), first + signed)
              for who, since, signed in attacks]
    log: list[Item] = [*honest, *forged]
    replicas = [
        early_replica(honest, forged, seeds_rng[0], delays, attack_delays),
        early_replica(honest, forged, seeds_rng[1], delays[::-1], attack_delays[::-1]),
        late_joiner(log, seeds_rng[2], SETTLE),
        late_joiner(log, seeds_rng[3], None),
    ]
    results = [outcome(r) for r in replicas]
    assert results[0][0] == owner
    assert all(r == results[0] for r in results)
    assert len(results[0][2]["users"]) == 6  # type: ignore[index]  # every honest row stays
    # The same log as a set: the book is a function of it.
    book = SchemaBook([d for d in log if isinstance(d, SchemaDeclaration)])
    assert book.history("users").timeline == results[0][1]  # type: ignore[union-attr]


@settings(max_examples=40, deadline=None)
@given(
    seeds=st.lists(honest_seed, min_size=1, max_size=4),
    early_at=st.integers(0, T0 - 1),
    rngs=st.lists(st.randoms(use_true_random=False), min_size=3, max_size=3),
)
def test_an_early_signed_claim_needs_a_pin_to_lose_on_a_late_joiner(
        seeds: list[tuple[str, int]], early_at: int, rngs: list[random.Random]) -> None:
    """What an open table lets a member do (docs/crdt.md): a claim whose *event* is stamped
    before the first honest claim wins on a replica that meets the table with it (a late
    joiner), while replicas that settled refuse it; with the owner pinned every replica refuses
    it and all converge."""
    honest_decls = [seed(sender, T0 + offset) for sender, offset in seeds]
    owner = min(honest_decls, key=lambda d: d.claim).sender
    honest: list[Item] = [*honest_decls, *rows(3)]
    early = SchemaDeclaration("users", {"name": "text"}, frozenset({ATTACKERS[0]}), early_at,
                              ATTACKERS[0])
    log: list[Item] = [*honest, early]
    settled = early_replica(honest, [], rngs[0], [0, 1, 2], [0])
    assert settled.apply(early, now_ms=T0 + 3 * SETTLE) == []
    assert settled.counters["schema_takeover"] == 1
    assert outcome(settled)[0] == owner
    assert outcome(late_joiner(log, rngs[1], SETTLE))[0] == ATTACKERS[0]  # open: lost
    pinned = late_joiner(log, rngs[2], SETTLE, pins={"users": owner})
    # Refused as a takeover, or as not the owner's when it came before the owner's seed.
    assert pinned.counters["schema_takeover"] + pinned.counters["schema_not_owner"] >= 1
    assert outcome(pinned)[:3] == outcome(settled)[:3]


def test_the_claim_of_a_backdated_declaration_is_its_event_time() -> None:
    book = SchemaBook(settle_ms=None)
    assert book.add(seed(HONEST[0], T0)) is Added.CHANGED
    # since 0, signed after the owner's seed: not a claim before it, on any replica.
    assert book.add(backdated(ATTACKERS[0], 0, T0 + 5)) is Added.NOT_OWNER
    # Signed before it, the claim order gives it the table (an honest upgrade seed racing).
    assert book.add(backdated(ATTACKERS[1], 0, T0 - 5)) is Added.RESCAN
    # A pinned (or settled) owner counts either as a takeover attempt.
    pinned = SchemaBook(pins={"users": HONEST[0]})
    pinned.add(seed(HONEST[0], T0))
    assert pinned.add(backdated(ATTACKERS[0], 0, T0 + 5)) is Added.TAKEOVER
