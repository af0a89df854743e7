from __future__ import annotations

import dataclasses
import random

import pytest
import trio
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, text

from node.store.events import EventStore
from storage import (
    append_events,
    count_events,
    current_revision,
    events_by_keys,
    events_by_message_ids,
    existing_keys,
    head_revision,
    key_at,
    keys_in_range,
    make_engine,
    max_seq,
    metadata,
    range_hash,
    read_channel,
    read_channel_newest,
    read_channel_ordered,
    stored_message_ids,
    upgrade,
)
from sync.recon import Sha256a
from sync.recon.sha256a import lanes_of
from tests.storage.conftest import make_record


def test_migration_from_empty_matches_schema(db_url: str) -> None:
    engine = make_engine(db_url)
    assert current_revision(engine) is None
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    upgrade(engine)  # idempotent
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(ctx, metadata) == []
    engine.dispose()


def test_a_database_stamped_with_0007s_first_id_is_restamped_not_migrated_again(
        db_url: str) -> None:
    # Revision 0007 first shipped as "0007_" plus a suffix; such a database holds 0007's schema.
    engine = make_engine(db_url)
    upgrade(engine, "0007")
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0007_old'"))
        conn.execute(text("INSERT INTO crdt_changes (table_name, entity_id, kind, lamport, "
                          "sender, at) VALUES ('t', 'e', 'upsert', 1, 's', 1)"))
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM crdt_changes")).scalar() == 1
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(ctx, metadata) == []
    engine.dispose()


def test_append_is_idempotent_and_reports_duplicates(engine: Engine) -> None:
    first = [make_record(i) for i in range(10)]
    with engine.begin() as conn:
        result = append_events(conn, first, received_at=1)
    assert [m for _, m in result.inserted] == [r.message_id for r in first]
    assert result.duplicates == ()

    again = [*first[5:], make_record(10), make_record(10)]
    with engine.begin() as conn:
        result = append_events(conn, again, received_at=2)
    assert [m for _, m in result.inserted] == [make_record(10).message_id]
    assert sorted(result.duplicates) == sorted(
        [r.message_id for r in first[5:]] + [make_record(10).message_id]
    )
    with engine.connect() as conn:
        assert count_events(conn) == 11
        assert max_seq(conn) == result.inserted[0][0]


def test_cursor_reads_page_through_a_channel(engine: Engine) -> None:
    records = [make_record(i, channel="a" if i % 3 else "b") for i in range(50)]
    with engine.begin() as conn:
        append_events(conn, records, received_at=5)
    with engine.connect() as conn:
        seen = []
        cursor = 0
        while page := read_channel(conn, "a", after_seq=cursor, limit=7):
            seen.extend(page)
            cursor = page[-1].seq
        assert [e.message_id for e in seen] == [r.message_id for r in records if r.channel == "a"]
        assert all(e.received_at == 5 for e in seen)
        assert count_events(conn, "b") == len([r for r in records if r.channel == "b"])
        ordered = read_channel_ordered(conn, "b", limit=1000)
        assert [(e.lamport, e.message_id) for e in ordered] == sorted(
            (r.lamport, r.message_id) for r in records if r.channel == "b"
        )
        tail = read_channel_ordered(conn, "b", after=(ordered[2].lamport, ordered[2].message_id))
        assert tail == ordered[3:]


def test_newest_part_of_a_channel_and_stored_ids(engine: Engine) -> None:
    # Lamports repeat, so the log order's tie-break on message_id decides the cut.
    records = [make_record(i, channel="a" if i % 4 else "b") for i in range(3000)]
    records = [r.__class__(r.recon_key, r.message_id, r.channel, r.sender, r.lamport // 3,
                           r.wire) for r in records]
    random.Random(5).shuffle(records)
    with engine.begin() as conn:
        append_events(conn, records, received_at=5)
    in_order = sorted((r.lamport, r.message_id) for r in records if r.channel == "a")
    with engine.connect() as conn:
        newest = read_channel_newest(conn, "a", 500)
        assert [(e.lamport, e.message_id) for e in newest] == in_order[-500:]
        assert [(e.lamport, e.message_id) for e in read_channel_newest(conn, "b", 10_000)] == (
            sorted((r.lamport, r.message_id) for r in records if r.channel == "b"))
        a_ids = [m for _, m in in_order]
        b_id = next(r.message_id for r in records if r.channel == "b")
        unknown = ["f" * 64, "0" * 64]
        # More ids than one IN list holds; ids of another channel do not count.
        asked = [*a_ids[:1500], b_id, *unknown]
        assert stored_message_ids(conn, "a", asked) == set(a_ids[:1500])
        assert stored_message_ids(conn, "b", asked) == {b_id}
        assert stored_message_ids(conn, "a", []) == set()


@pytest.mark.parametrize("precomputed", [False, True])
def test_range_hash_matches_pure_python(engine: Engine, precomputed: bool) -> None:
    records = [make_record(i, sender=f"p{i % 4}") for i in range(300)]
    if precomputed:  # lanes computed by the caller (the ingest workers) are stored as given
        records = [dataclasses.replace(r, lanes=lanes_of(r.recon_key)) for r in records]
    with engine.begin() as conn:
        append_events(conn, records, received_at=0)
    keys = sorted(r.recon_key for r in records)
    rng = random.Random(7)
    with engine.connect() as conn:
        assert range_hash(conn, b"", None) == Sha256a.of(keys)
        assert range_hash(conn, b"\xff", None) == Sha256a()
        for _ in range(40):
            a, b = sorted(rng.sample(range(len(keys) + 1), 2))
            lo = keys[a] if a < len(keys) else b"\xff" * 80
            hi = keys[b] if b < len(keys) else None
            expected = Sha256a.of(k for k in keys if k >= lo and (hi is None or k < hi))
            assert range_hash(conn, lo, hi) == expected
            assert keys_in_range(conn, lo, hi, limit=5) == [
                k for k in keys if k >= lo and (hi is None or k < hi)
            ][:5]
        assert key_at(conn, keys[10], keys[20], 3) == keys[13]
        assert key_at(conn, keys[10], keys[20], 10) is None
        assert existing_keys(conn, [keys[0], b"nope"]) == {keys[0]}
        assert sorted(e.recon_key for e in events_by_keys(conn, keys[:3])) == keys[:3]
        got = events_by_message_ids(conn, [records[4].message_id])
        assert [e.wire for e in got] == [records[4].wire]


def test_large_batches_cross_the_insert_chunk_size(engine: Engine) -> None:
    records = [make_record(i) for i in range(2500)]
    with engine.begin() as conn:
        result = append_events(conn, records, received_at=0)
    assert len(result.inserted) == 2500
    with engine.connect() as conn:
        assert count_events(conn) == 2500


def test_event_store_answers_for_queued_and_committed_ids(engine: Engine) -> None:
    """``EventStore.stored_ids``: what a channel keeping only recent ids in memory asks."""
    store = EventStore(engine, max_batch=64, max_delay_ms=50)
    committed = [make_record(i) for i in range(3)]
    queued = [make_record(10 + i) for i in range(3)]
    other = make_record(20, channel="other")
    ids = [r.message_id for r in [*committed, *queued, other]] + ["f" * 64]
    seen: dict[str, set[str]] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run_writer)
            await store.append([*committed, other])
            store.submit(queued)  # not committed yet: the writer has not run since
            seen["queued"] = await store.stored_ids("general", ids)
            await store.append([make_record(30)])  # the writer commits what was queued too
            seen["after"] = await store.stored_ids("general", ids)
            await store.close()

    trio.run(main)
    expected = {r.message_id for r in [*committed, *queued]}
    assert seen["queued"] == expected and seen["after"] == expected
    assert store.id_lookups == 2


def test_append_returns_the_seq_of_each_row_and_skips_key_conflicts(engine: Engine) -> None:
    """The driver-level insert paths name exactly the rows they wrote: a record whose Recon key
    is stored already (here under another message id, in the log or earlier in the same batch)
    is a duplicate, and every returned (seq, id) pair is the stored row with its lanes."""
    stored = [make_record(i) for i in range(5)]
    with engine.begin() as conn:
        append_events(conn, stored, received_at=1)
    same_key_old = dataclasses.replace(make_record(100), recon_key=stored[2].recon_key)
    new = make_record(101)
    same_key_new = dataclasses.replace(make_record(102), recon_key=new.recon_key)
    with engine.begin() as conn:
        result = append_events(conn, [same_key_old, new, same_key_new, make_record(103)], 2)
    assert [m for _, m in result.inserted] == [new.message_id, make_record(103).message_id]
    assert sorted(result.duplicates) == sorted([same_key_old.message_id, same_key_new.message_id])
    with engine.connect() as conn:
        rows = {e.message_id: e for e in read_channel(conn, "general")}
        assert len(rows) == 7
        for seq, mid in result.inserted:
            assert rows[mid].seq == seq and rows[mid].received_at == 2
        everything = range_hash(conn, b"", None)
    assert everything == Sha256a.of(r.recon_key for r in [*stored, new, make_record(103)])
