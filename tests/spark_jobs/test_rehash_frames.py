"""The rehash job's transforms on a small in-memory DataFrame (no JDBC read): ``transform``
sums the buckets and flags the disagreeing event, ``explain_rows`` picks it out and
``bad_partials`` gives both sides of its bucket."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from spark_jobs import rehash
from storage import events, make_engine
from tests.spark_jobs.conftest import NETWORK_ID, SPEC

SCHEMA = ("seq long, recon_key binary, message_id string, channel string, sender string, "
          "lamport long, wire binary, " + ", ".join(f"lane{i} long" for i in range(8)))


def _rows(template_db: Path) -> list[tuple[Any, ...]]:
    engine = make_engine(f"sqlite:///{template_db}")
    with engine.connect() as conn:
        rows = [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in
                conn.execute(select(*(events.c[c] for c in rehash.INPUT_COLUMNS))
                             .order_by(events.c.seq))]
    engine.dispose()
    return rows


def test_transforms_find_and_explain_one_wrong_lane(spark: Any, template_db: Path) -> None:
    rows = _rows(template_db)
    bad = list(rows[100])
    lane5 = rehash.INPUT_COLUMNS.index("lane5")
    bad[lane5] = (bad[lane5] + 1) % 2**32
    rows[100] = tuple(bad)
    df = spark.createDataFrame(rows, SCHEMA).repartition(2)
    channel, key = bad[rehash.INPUT_COLUMNS.index("channel")], bad[1]
    bucket = bytes([rehash.bucket_of(NETWORK_ID, channel, key)])

    sums = rehash.transform(df, NETWORK_ID).collect()
    assert sum(r["count"] for r in sums) == SPEC.events
    disagreeing = [r for r in sums if not r["agrees"]]
    assert [(r["channel"], bytes(r["bucket"]), r["count"]) for r in disagreeing] == [
        (channel, bucket, 1)]

    explained = rehash.explain_rows(df, NETWORK_ID)
    listed = explained.select("seq", "x").collect()
    assert [r["seq"] for r in listed] == [bad[0]]
    assert "lane5: stored" in listed[0]["x"]["problems"]

    partials = {r["side"]: r for r in rehash.bad_partials(explained).collect()}
    assert set(partials) == {rehash.STORED, rehash.COMPUTED}
    stored, computed = partials[rehash.STORED], partials[rehash.COMPUTED]
    assert (stored["channel"], stored["bucket"], stored["count"]) == (
        channel, bucket[0], 1)
    assert (computed["channel"], computed["bucket"], computed["count"]) == (
        channel, bucket[0], 1)
    assert (stored["l5"] - computed["l5"]) % 2**32 == 1
    assert [stored[f"l{i}"] for i in range(8) if i != 5] == [
        computed[f"l{i}"] for i in range(8) if i != 5]
