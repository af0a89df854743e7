"""Schemas declared on the log: encoding, owners, versions in force, epochs, bounds, and a
state machine over interleavings of declarations, writes, deletes and compaction."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from sync.crdt import (
    Added,
    CrdtMessage,
    MemoryReplica,
    Operation,
    RejectReason,
    SchemaBook,
    SchemaDeclaration,
    TableHistory,
    Value,
    decode_content,
    value_text,
)
from sync.errors import LocalProtocolError, RemoteProtocolError


def declare(table: str, ts: int, sender: str = "alice", writers: list[str] | None = None,
            **columns: str) -> SchemaDeclaration:
    return SchemaDeclaration(table, columns, None if writers is None else frozenset(writers),
                             timestamp=ts, sender=sender)


def write(op: str, table: str, entity: str, ts: int, sender: str = "alice",
          **values: Value) -> CrdtMessage:
    return CrdtMessage(Operation(op), table, entity, values, timestamp=ts, sender=sender)


# -- encoding -------------------------------------------------------------------------------


def test_declaration_round_trips_in_one_canonical_form() -> None:
    d = declare("users", 5, "bob", writers=["p2", "p1"], name="text", age="integer")
    # Columns keep the declared order (what db query shows); writers are a sorted set.
    assert d.encoded == (b'{"columns":[["name","text"],["age","integer"]],"crdt":1,"op":"schema",'
                         b'"table":"users","writers":["p1","p2"]}')
    assert list(decode_content(d.encoded, timestamp=5, sender="bob").schema.columns) == [
        "name", "age"]
    back = decode_content(d.encoded, timestamp=5, sender="bob")
    assert back == d and isinstance(back, SchemaDeclaration)
    assert back.schema.writers == frozenset({"p1", "p2"})
    msg = write("upsert", "users", "u1", 6, name="x")
    assert decode_content(msg.encoded, timestamp=6, sender="alice") == msg


@pytest.mark.parametrize("data", [
    b'{"columns":[["age","int"]],"crdt":1,"op":"schema","table":"users","writers":null}',
    b'{"columns":[["id","text"]],"crdt":1,"op":"schema","table":"users","writers":null}',
    b'{"columns":[],"crdt":1,"op":"schema","table":"users","writers":"p1"}',
    b'{"columns":[],"crdt":1,"op":"schema","table":"users","writers":["b","a"]}',
    b'{"columns":[],"crdt":1,"op":"schema","table":"users"}',
    b'{"columns":{},"crdt":1,"op":"schema","table":"users","writers":null}',
    b'{"columns":{"a":"text"},"crdt":1,"op":"schema","table":"users","writers":null}',
    b'{"columns":[["a","text"],["a","text"]],"crdt":1,"op":"schema","table":"users",'
    b'"writers":null}',
    b'{"columns":[["a"]],"crdt":1,"op":"schema","table":"users","writers":null}',
    b'{"columns":[],"crdt":1,"op":"schema","table":"bad name","writers":null}',
    b'{"columns":[], "crdt":1,"op":"schema","table":"users","writers":null}',
    b'{"columns":[],"crdt":2,"op":"schema","table":"users","writers":null}',
    # since: an integer from 0 to the event's timestamp (1 here), present only when set
    b'{"columns":[],"crdt":1,"op":"schema","since":2,"table":"users","writers":null}',
    b'{"columns":[],"crdt":1,"op":"schema","since":-1,"table":"users","writers":null}',
    b'{"columns":[],"crdt":1,"op":"schema","since":true,"table":"users","writers":null}',
    b'{"columns":[],"crdt":1,"op":"schema","since":0.0,"table":"users","writers":null}',
    b'{"columns":[],"crdt":1,"op":"schema","since":null,"table":"users","writers":null}',
])
def test_bad_declarations_are_remote_errors(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_content(data, timestamp=1, sender="p")


def test_a_backdated_declaration_is_in_force_from_its_since() -> None:
    d = SchemaDeclaration("users", {"name": "text"}, None, 0, "alice", backdated=True)
    assert d.encoded == (b'{"columns":[["name","text"]],"crdt":1,"op":"schema","since":0,'
                         b'"table":"users","writers":null}')
    # Carried by an event at Lamport 900: its timestamp is 0, on every node alike.
    back = decode_content(d.encoded, timestamp=900, sender="alice")
    assert isinstance(back, SchemaDeclaration) and back.timestamp == 0
    # Its claim on the table is dated by the event (Lamport 900), not by since.
    assert back.claim[0] == 900 and back == dataclasses.replace(d, claimed_at=900)
    # Stored with the event's timestamp and read back, it is the same declaration.
    assert decode_content(d.encoded, timestamp=900, sender="alice") == back
    # Writes from before the event (an upgraded node's old log) count from then on.
    replica = MemoryReplica()
    early = write("upsert", "users", "u1", 5, name="old row")
    replica.apply(early)
    assert replica.get("users", "u1") is None  # no such table yet: rejected
    replica.apply(back)
    assert replica.get("users", "u1") == {"name": "old row"}
    # It owns the table against a declaration signed later, whatever the order; but since
    # dates the version, not the claim: one signed before its event (300 < 900) owns it.
    for bob_at, owner in ((1000, "alice"), (300, "bob")):
        other = declare("users", bob_at, "bob", name="text", extra="integer")
        for order in ([back, other], [other, back]):
            book = SchemaBook()
            for declaration in order:
                book.add(declaration)
            history = book.history("users")
            assert history is not None and history.owner == owner
            assert SchemaBook(order).history("users").timeline == history.timeline  # type: ignore[union-attr]


def test_declaration_bounds() -> None:
    with pytest.raises(LocalProtocolError):
        SchemaDeclaration("t", {f"c{i}": "text" for i in range(257)}, timestamp=1, sender="p")
    with pytest.raises(LocalProtocolError):
        SchemaDeclaration("t", {}, frozenset(f"p{i}" for i in range(1025)), 1, "p")


# -- history: owner, version in force, epochs -----------------------------------------------


def test_first_declaration_names_the_owner_and_only_its_versions_count() -> None:
    v1 = declare("t", 10, "alice", name="text")
    intruder = declare("t", 12, "mallory", name="text", evil="text")
    v2 = declare("t", 20, "alice", name="text", age="integer")
    history = TableHistory("t", [v2, intruder, v1])
    assert history.owner == "alice" and history.versions == (v1, v2)
    assert history.at(10) is None  # a write at the version's own time precedes it
    assert history.at(11) == v1.schema and history.at(20) == v1.schema
    assert history.at(21) == v2.schema
    pinned = TableHistory("t", [v2, intruder, v1], owner="mallory")
    assert pinned.versions == (intruder,)


def test_epochs_hide_cells_of_an_older_type() -> None:
    history = TableHistory("t", [
        declare("t", 1, a="text", b="text"),
        declare("t", 5, a="integer", b="text"),  # a changes type
        declare("t", 7, b="text"),  # a removed
        declare("t", 9, a="integer", b="text", c="real"),  # a back, c added
    ])
    assert dict(history.epochs) == {"a": 9, "b": -1, "c": 9}


def test_type_change_is_never_served_as_the_new_type() -> None:
    r = MemoryReplica()
    r.apply(declare("t", 1, a="text"))
    r.apply(write("upsert", "t", "e", 3, a="words"))
    assert r.get("t", "e") == {"a": "words"}
    r.apply(declare("t", 5, a="integer"))
    assert r.get("t", "e") == {"a": None}
    r.apply(write("update", "t", "e", 6, a="text again"))  # judged by the integer version
    assert r.counters["rejected_bad_type"] == 1 and r.get("t", "e") == {"a": None}
    r.apply(write("update", "t", "e", 7, a=42))
    assert r.get("t", "e") == {"a": 42}


def test_writes_before_the_version_that_allows_them_are_reevaluated() -> None:
    r = MemoryReplica()
    r.apply(declare("t", 1, writers=["alice"], a="text"))
    early = [write("upsert", "t", "e", 5, "bob", a="x"), write("update", "t", "e", 6, b=1)]
    for message in early:
        assert r.apply(message)[0].reason in (  # type: ignore[union-attr]
            RejectReason.UNAUTHORISED_WRITER, RejectReason.UNKNOWN_COLUMN)
    assert r.get("t", "e") is None
    r.apply(declare("t", 3, writers=["alice", "bob"], a="text", b="integer"))
    assert r.get("t", "e") == {"a": "x", "b": 1}
    # A version that arrives late and forbids them takes them back out, everywhere alike.
    r.apply(declare("t", 4, writers=["alice"], a="text", b="integer"))
    assert r.get("t", "e") is None


def test_book_bounds_versions_and_tables_by_log_order() -> None:
    book = SchemaBook(max_versions=2, max_tables=2)
    assert book.add(declare("t", 1, x="text")) is Added.CHANGED
    assert book.add(declare("t", 1, x="text")) is Added.DUPLICATE
    assert book.add(declare("t", 5, x="text", y="text")) is Added.CHANGED
    assert book.add(declare("t", 9, y="text")) is Added.TOO_MANY_VERSIONS
    assert book.add(declare("t", 3, z="text")) is Added.CHANGED  # earlier: pushes out ts 5
    assert [d.timestamp for d in book.declarations("t")] == [1, 3]
    assert book.add(declare("t", 2, "bob", z="text")) is Added.NOT_OWNER
    assert book.add(declare("t", 0, "bob", z="text")) is Added.RESCAN  # bob declared first
    assert book.history("t").owner == "bob"  # type: ignore[union-attr]
    assert book.add(declare("u", 4, q="text")) is Added.CHANGED
    assert book.add(declare("v", 6, q="text")) is Added.TOO_MANY_TABLES
    assert book.add(declare("v", 2, q="text")) is Added.RESCAN  # earlier than u's: u goes
    assert book.take_evicted() == ["u"] and book.tables() == ["t", "v"]
    pinned = SchemaBook(pins={"t": "alice"})
    assert pinned.add(declare("t", 0, "bob", z="text")) is Added.NOT_OWNER
    closed = SchemaBook(declarers=["alice"])
    assert closed.add(declare("w", 0, "mallory", z="text")) is Added.NOT_DECLARER
    assert closed.tables() == []


# -- state machine --------------------------------------------------------------------------

TABLES = ("t1", "t2", "t3")
SENDERS = ("alice", "bob", "carol")
VALUES: dict[str, list[Value]] = {
    "a": ["x", "y", 1, None], "b": [1, 2, "z", None], "c": [True, 1.5, None],
}
WINDOW = 4


@st.composite
def declarations(draw: st.DrawFn) -> SchemaDeclaration:
    columns = draw(st.dictionaries(st.sampled_from(sorted(VALUES)),
                                   st.sampled_from(["text", "integer", "real", "boolean"]),
                                   max_size=3))
    writers = draw(st.none() | st.sets(st.sampled_from(SENDERS), min_size=1))
    # Mostly alice, the usual owner; bob and carol sometimes race or intrude.
    sender = draw(st.sampled_from(("alice", "alice", "alice", "bob", "carol")))
    return SchemaDeclaration(draw(st.sampled_from(TABLES)), columns, writers,
                             draw(st.integers(0, 8)), sender)


@st.composite
def writes(draw: st.DrawFn) -> CrdtMessage:
    op = draw(st.sampled_from(Operation))
    values: dict[str, Value] = {}
    if op is not Operation.DELETE:
        columns = draw(st.lists(st.sampled_from(sorted(VALUES)), unique=True,
                                min_size=op is Operation.UPDATE, max_size=2))
        values = {c: draw(st.sampled_from(VALUES[c])) for c in columns}
    return CrdtMessage(op, draw(st.sampled_from(TABLES)), draw(st.sampled_from(("e1", "e2"))),
                       values, timestamp=draw(st.integers(0, 12)),
                       sender=draw(st.sampled_from(SENDERS)))


Item = CrdtMessage | SchemaDeclaration


def canonical(replica: MemoryReplica) -> object:
    return (
        {t: {e: {c: value_text(v) for c, v in row.items()} for e, row in rows.items()}
         for t, rows in replica.tables().items()},
        [(key, s.upserted, s.deleted,
          sorted((c, x.timestamp, value_text(x.value), x.sender) for c, x in s.cells.items()))
         for key, s in replica.state().items()],
    )


def new_replica() -> MemoryReplica:
    # Small bounds, so that version and table evictions happen in the interleavings too.
    return MemoryReplica(max_versions=2, max_tables=2)


class Interleavings(RuleBasedStateMachine):
    """Three replicas receive the same declarations and writes in their own orders, with
    duplicates, and compact whenever the stability window holds for them (every item at or
    before the horizon delivered). Once all is delivered and compacted, they agree with each
    other and with a replica that applied everything in one go."""

    @initialize(pool=st.lists(declarations(), min_size=1, max_size=6).flatmap(
        lambda ds: st.lists(writes(), min_size=4, max_size=20).map(lambda ws: ds + ws)))
    def setup(self, pool: list[Item]) -> None:
        self.pool = pool
        self.replicas = [new_replica() for _ in range(3)]
        self.pending = [set(range(len(pool))) for _ in range(3)]

    @rule(r=st.integers(0, 2), data=st.data())
    def deliver(self, r: int, data: st.DataObject) -> None:
        if self.pending[r]:
            index = data.draw(st.sampled_from(sorted(self.pending[r])))
            self.pending[r].discard(index)
        else:
            index = data.draw(st.integers(0, len(self.pool) - 1))  # a duplicate
        self.replicas[r].apply(self.pool[index])

    def stable(self, r: int) -> bool:
        replica = self.replicas[r]
        return all(
            self.pool[i].timestamp > replica.high.get(self.pool[i].table, 0) - WINDOW
            for i in self.pending[r]
        )

    @precondition(lambda self: any(self.stable(r) for r in range(3)))
    @rule(r=st.integers(0, 2))
    def compact(self, r: int) -> None:
        if self.stable(r):
            self.replicas[r].compact(WINDOW)

    def teardown(self) -> None:
        if not hasattr(self, "pool"):
            return
        for r, replica in enumerate(self.replicas):
            for index in sorted(self.pending[r]):
                replica.apply(self.pool[index])
            replica.compact(WINDOW)
        one_go = new_replica()
        for item in sorted(self.pool, key=lambda i: (i.timestamp, i.sender, i.encoded)):
            one_go.apply(item)
        one_go.compact(WINDOW)
        expected = canonical(one_go)
        for replica in self.replicas:
            assert canonical(replica) == expected


Interleavings.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                           deadline=None)
test_interleavings_converge = Interleavings.TestCase
