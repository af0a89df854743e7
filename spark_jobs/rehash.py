"""``rehash``: recompute every stored event's digest, Recon key and Sha256a lanes from its wire.

Per event, from the signed wire bytes alone: the SDS digest of the stable fields (must equal the
wire's own message id and the stored ``message_id``), channel / sender / Lamport time (must equal
the stored columns), the Recon key ``event_key(network_id, ...)`` (must equal ``recon_key``) and
the 8 Sha256a lanes of that key (must equal ``lane0..lane7``). Per range the node serves, per
channel and per key bucket (the channel's key prefix plus one more byte, 256 buckets per channel),
the Sha256a and count of the stored lanes are compared with the recomputed ones.

Per event, Python only decodes the wire and rebuilds the Recon key (a pickled-batch UDF: pyarrow
is not installed); the sha256 lanes of the keys, the comparisons and the sums run in the JVM, and
only the rare disagreeing rows go back to Python to be explained. ``RowChecker.partition`` is the
same re-hash as one plain loop (the benchmark's single-process baseline).

``python -m spark_jobs.rehash --db URL --network-id N [--master M] [--report FILE]`` exits 0
when everything agrees, 1 when something disagrees (listed in the report), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from storage import LANE_COLUMNS, make_engine, range_hash
from sync.errors import RemoteProtocolError
from sync.recon.eventid import cbor_uint, channel_bounds, event_cid, prefix_successor, stream_prefix
from sync.recon.sha256a import MASK32, Sha256a, lanes_of
from sync.sds import decode_event, event_digest, sds_pb2

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "INPUT_COLUMNS",
    "RowChecker",
    "build_report",
    "main",
    "range_findings",
    "transform",
]

INPUT_COLUMNS = ("seq", "recon_key", "message_id", "channel", "sender", "lamport", "wire",
                 *LANE_COLUMNS)
_CID_HEAD = event_cid(bytes(32))[:-32]
_WIRE_LIMIT = 1 << 20
# Sides of a partial sum: rows whose stored and recomputed values agree count once for both.
BOTH, STORED, COMPUTED = "both", "stored", "computed"


@lru_cache(maxsize=65536)
def _prefix(network_id: int, channel: str, sender: str | None) -> bytes:
    return stream_prefix(network_id, channel, sender)


def bucket_of(network_id: int, channel: str, key: bytes) -> int:
    """The key bucket: the byte after the channel prefix; -1 when outside the channel's range."""
    prefix = _prefix(network_id, channel, None)
    if len(key) <= len(prefix) or not key.startswith(prefix):
        return -1
    return key[len(prefix)]


def bucket_bounds(network_id: int, channel: str, bucket: int) -> tuple[bytes, bytes]:
    lo = _prefix(network_id, channel, None) + bytes([bucket])
    return lo, prefix_successor(lo)


@dataclass
class _Acc:
    count: int = 0
    lanes: list[int] = field(default_factory=lambda: [0] * 8)

    def add(self, lanes: Sequence[int]) -> None:
        self.count += 1
        acc = self.lanes
        for i in range(8):
            acc[i] += lanes[i]


@dataclass(frozen=True)
class RowChecker:
    """The per-event re-hash, shared by the Spark job and the plain-Python baseline."""

    network_id: int
    verify_signatures: bool = False

    def problems(self, row: Sequence[Any]) -> tuple[list[str], str | None, bytes | None,
                                                    tuple[int, ...] | None]:
        """(problems, recomputed channel, recomputed key, its lanes) of one input row."""
        _seq, key, mid, channel, sender, lamport, wire = row[:7]
        stored_lanes = tuple(row[7:15])
        msg = sds_pb2.Message()
        try:
            if len(wire) > _WIRE_LIMIT:
                raise ValueError("wire over 1 MiB")
            msg.ParseFromString(wire)
        except Exception as exc:  # any decoder error means the stored bytes are bad
            return [f"wire: undecodable ({type(exc).__name__})"], None, None, None
        w_channel, w_sender = msg.channel_id, msg.sender_id
        if not msg.HasField("lamport_timestamp"):
            return ["wire: no lamport timestamp (not a stored content event)"], None, None, None
        w_lamport = msg.lamport_timestamp
        ids = [h.message_id for h in msg.causal_history]
        digest = event_digest(w_channel, w_sender, w_lamport, ids, msg.content)
        hexd = digest.hex()
        out: list[str] = []
        if hexd != msg.message_id:
            out.append(f"digest: wire content hashes to {hexd}, its message id is {msg.message_id}")
        if mid != hexd:
            out.append(f"message_id: stored {mid}, recomputed {hexd}")
        if channel != w_channel:
            out.append(f"channel: stored {channel!r}, wire {w_channel!r}")
        if sender != w_sender:
            out.append(f"sender: stored {sender!r}, wire {w_sender!r}")
        if lamport != w_lamport:
            out.append(f"lamport: stored {lamport}, wire {w_lamport}")
        computed = (_prefix(self.network_id, w_channel, w_sender) + cbor_uint(w_lamport)
                    + _CID_HEAD + digest)
        lanes = lanes_of(computed)
        if key != computed:
            out.append(f"recon_key: stored {bytes(key).hex()}, recomputed {computed.hex()}")
        elif stored_lanes != lanes:
            out.extend(
                f"{LANE_COLUMNS[i]}: stored {stored_lanes[i]}, recomputed {lanes[i]}"
                for i in range(8) if stored_lanes[i] != lanes[i]
            )
        if self.verify_signatures and not out:
            try:
                decode_event(wire, verify_signature=True)
            except RemoteProtocolError as exc:
                out.append(f"signature: {exc}")
        return out, w_channel, computed, lanes

    def rekey(self, wire: bytes, mid: str, channel: str, sender: str, lamport: int) -> bytes:
        """The Recon key recomputed from ``wire`` when the stored columns agree with it (and
        the wire with its own message id), else ``b""``: the Spark job's per-event fast path."""
        msg = sds_pb2.Message()
        try:
            if len(wire) > _WIRE_LIMIT:
                return b""
            msg.ParseFromString(wire)
        except Exception:  # any decoder error: explained by ``problems`` later
            return b""
        if (not msg.HasField("lamport_timestamp") or msg.channel_id != channel
                or msg.sender_id != sender or msg.lamport_timestamp != lamport):
            return b""
        ids = [h.message_id for h in msg.causal_history]
        digest = event_digest(channel, sender, lamport, ids, msg.content)
        hexd = digest.hex()
        if hexd != mid or hexd != msg.message_id:
            return b""
        if self.verify_signatures:
            try:
                decode_event(wire, verify_signature=True)
            except RemoteProtocolError:
                return b""
        return _prefix(self.network_id, channel, sender) + cbor_uint(lamport) + _CID_HEAD + digest

    def explain(self, *row: Any) -> tuple[str, str | None, bytes | None]:
        """(problems as JSON, recomputed channel, recomputed key) of a row that failed."""
        problems, channel, key, _lanes = self.problems(row)
        return json.dumps(problems), channel, key

    def partition(self, rows: Iterable[Sequence[Any]]) -> Iterator[tuple[Any, ...]]:
        """The whole re-hash of a sequence of rows in plain Python: problem rows, then partial
        sums per side and bucket (tuples following ``PARTIAL_FIELDS``)."""
        sums: dict[tuple[str, str, int], _Acc] = {}
        nid = self.network_id
        for row in rows:
            problems, w_channel, computed, lanes = self.problems(row)
            channel, key = row[3], bytes(row[1])
            if not problems:
                slot = (BOTH, channel, bucket_of(nid, channel, key))
                if (acc := sums.get(slot)) is None:
                    acc = sums[slot] = _Acc()
                acc.add(lanes)  # type: ignore[arg-type]
                continue
            yield ("row", "", channel, -1, 0, *([0] * 8), int(row[0]), str(row[2]),
                   json.dumps(problems))
            pairs = [(STORED, channel, key, tuple(row[7:15]))]
            if w_channel is not None and computed is not None and lanes is not None:
                pairs.append((COMPUTED, w_channel, computed, lanes))
            for side, ch, k, ls in pairs:
                slot = (side, ch, bucket_of(nid, ch, k))
                if (acc := sums.get(slot)) is None:
                    acc = sums[slot] = _Acc()
                acc.add(ls)
        for (side, channel, bucket), acc in sums.items():
            yield ("sum", side, channel, bucket, acc.count,
                   *(v & MASK32 for v in acc.lanes), 0, "", "")


PARTIAL_FIELDS = ("kind", "side", "channel", "bucket", "count",
                  *(f"l{i}" for i in range(8)), "seq", "message_id", "problems")


def _native_lanes(key: Any) -> list[Any]:
    """The 8 little-endian u32 lanes of sha256(key), in the JVM (no Python round trip)."""
    from pyspark.sql import functions as F

    h = F.sha2(key, 256)
    lanes = []
    for i in range(8):
        # Little-endian: the lane's 4 bytes (8 hex digits) read back to front.
        le = F.concat(*(F.substring(h, 8 * i + 2 * j + 1, 2) for j in (3, 2, 1, 0)))
        lanes.append(F.conv(le, 16, 10).cast("long"))
    return lanes


def _native_bucket(key: Any, network_id: int) -> Any:
    from pyspark.sql import functions as F

    offset = len(_prefix(network_id, "", None))  # head + 8 separator bytes, for any channel
    return F.conv(F.hex(F.substring(key, offset + 1, 1)), 16, 10).cast("int")


def transform(df: DataFrame, network_id: int, *, verify_signatures: bool = False) -> DataFrame:
    """Events (``INPUT_COLUMNS``) -> findings: one row per disagreeing event and one per range.

    Columns: ``level`` (``row``, ``channel``, ``bucket``), ``channel``, ``bucket`` (-1 for rows
    and channels), ``seq``, ``message_id``, ``problems`` (JSON list), ``stored_count``,
    ``computed_count``, ``stored_lanes`` / ``computed_lanes`` (arrays of 8 u32), ``ok``.

    Per event, Python only decodes the wire and rebuilds the key (``RowChecker.rekey``, a
    pickled-batch UDF); the lanes of sha256(key), the comparisons and the sums run in the JVM.
    The rare disagreeing rows are explained in Python afterwards (``RowChecker.explain``).
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    checker = RowChecker(network_id, verify_signatures)
    rekey = F.udf(checker.rekey, BinaryType(), useArrow=False)
    explain = F.udf(checker.explain, useArrow=False, returnType=StructType([
        StructField("problems", StringType()), StructField("channel", StringType()),
        StructField("key", BinaryType())]))
    lanes = _native_lanes(F.col("recon_key"))
    good = F.col("k") == F.col("recon_key")
    for i, name in enumerate(LANE_COLUMNS):
        good = good & (F.col(name) == lanes[i])
    # Cached: rows, stored sums and recomputed sums all read the one Python pass.
    checked = df.select(*INPUT_COLUMNS).withColumn(
        "k", rekey("wire", "message_id", "channel", "sender", "lamport")
    ).withColumn("good", good).select(
        *(c for c in INPUT_COLUMNS if c != "wire"), "good",
        F.when(F.col("good"), F.lit(None)).otherwise(F.col("wire")).alias("wire"),
    ).persist(StorageLevel.MEMORY_AND_DISK)
    bad = checked.where(~F.col("good")).withColumn("x", explain(*INPUT_COLUMNS))
    zero = [F.lit(0).cast("long").alias(f"l{i}") for i in range(8)]

    def sums(frame: DataFrame, side: str, channel: Any, key: Any, lane_cols: list[Any]
             ) -> DataFrame:
        return frame.select(
            F.lit("sum").alias("kind"), F.lit(side).alias("side"), channel.alias("channel"),
            _native_bucket(key, network_id).alias("bucket"), F.lit(1).cast("long").alias("count"),
            *(c.alias(f"l{i}") for i, c in enumerate(lane_cols)),
            F.lit(0).cast("long").alias("seq"), F.lit("").alias("message_id"),
            F.lit("").alias("problems"))

    partials = (
        bad.select(F.lit("row").alias("kind"), F.lit("").alias("side"), "channel",
                   F.lit(-1).alias("bucket"), F.lit(0).cast("long").alias("count"), *zero,
                   "seq", "message_id", F.col("x.problems").alias("problems"))
        .unionByName(sums(checked.where("good"), BOTH, F.col("channel"), F.col("recon_key"),
                          lanes))
        .unionByName(sums(bad, STORED, F.col("channel"), F.col("recon_key"),
                          [F.col(n) for n in LANE_COLUMNS]))
        .unionByName(sums(bad.where(F.col("x.key").isNotNull()), COMPUTED,
                          F.col("x.channel"), F.col("x.key"), _native_lanes(F.col("x.key"))))
    )
    return range_findings(partials)


def range_findings(partials: DataFrame) -> DataFrame:
    """Add up partial sums per bucket and per channel; keep the problem rows."""
    from pyspark.sql import functions as F

    sums = partials.where(F.col("kind") == "sum")

    def side_sum(name: str, sides: tuple[str, ...]) -> Any:
        return F.sum(F.when(F.col("side").isin(*sides), F.col(name)).otherwise(F.lit(0)))

    stored_sides, computed_sides = (BOTH, STORED), (BOTH, COMPUTED)
    aggs = [
        side_sum("count", stored_sides).alias("stored_count"),
        side_sum("count", computed_sides).alias("computed_count"),
        *(side_sum(f"l{i}", stored_sides).alias(f"s{i}") for i in range(8)),
        *(side_sum(f"l{i}", computed_sides).alias(f"c{i}") for i in range(8)),
    ]
    mod = F.lit(1 << 32)

    def finish(df: DataFrame, level: str) -> DataFrame:
        stored = F.array(*(F.pmod(F.col(f"s{i}"), mod) for i in range(8)))
        computed = F.array(*(F.pmod(F.col(f"c{i}"), mod) for i in range(8)))
        return df.select(
            F.lit(level).alias("level"), "channel", F.col("bucket").cast("int"),
            F.lit(None).cast("long").alias("seq"), F.lit(None).cast("string").alias("message_id"),
            F.lit(None).cast("string").alias("problems"),
            F.col("stored_count").cast("long"), F.col("computed_count").cast("long"),
            stored.alias("stored_lanes"), computed.alias("computed_lanes"),
        ).withColumn("ok", (F.col("stored_count") == F.col("computed_count"))
                     & (F.col("stored_lanes") == F.col("computed_lanes")))

    buckets = finish(sums.groupBy("channel", "bucket").agg(*aggs), "bucket")
    channels = finish(sums.groupBy("channel").agg(*aggs).withColumn("bucket", F.lit(-1)),
                      "channel")
    no_lanes = F.lit(None).cast("array<long>")
    rows = partials.where(F.col("kind") == "row").select(
        F.lit("row").alias("level"), "channel", F.col("bucket").cast("int"), "seq", "message_id",
        "problems", F.lit(None).cast("long").alias("stored_count"),
        F.lit(None).cast("long").alias("computed_count"), no_lanes.alias("stored_lanes"),
        no_lanes.alias("computed_lanes"), F.lit(False).alias("ok"),
    )
    return rows.unionByName(channels).unionByName(buckets)


def _hash_entry(count: int, lanes: Sequence[int]) -> dict[str, Any]:
    return {"count": int(count), "hash": Sha256a(tuple(int(v) for v in lanes), count).hex()}


def build_report(
    findings: Iterable[Any],
    network_id: int,
    served: dict[str, Sha256a] | None = None,
    *,
    max_rows: int = 1000,
) -> dict[str, Any]:
    """The JSON report from collected findings (and, optionally, the SQL range hashes served).

    ``ranges`` lists only disagreeing buckets; ``channels`` lists every channel.
    """
    rows: list[dict[str, Any]] = []
    bad_rows = 0
    channels: list[dict[str, Any]] = []
    ranges: list[dict[str, Any]] = []
    events = 0
    for f in findings:
        if f["level"] == "row":
            bad_rows += 1
            rows.append({"seq": f["seq"], "message_id": f["message_id"], "channel": f["channel"],
                         "problems": json.loads(f["problems"])})
            continue
        entry = {"channel": f["channel"], "stored": _hash_entry(f["stored_count"],
                                                                 f["stored_lanes"]),
                 "recomputed": _hash_entry(f["computed_count"], f["computed_lanes"]),
                 "ok": bool(f["ok"])}
        if f["level"] == "channel":
            events += int(f["stored_count"])
            lo, hi = channel_bounds(network_id, f["channel"])
            entry.update(lo=lo.hex(), hi=hi.hex())
            if served is not None and f["channel"] in served:
                value = served[f["channel"]]
                entry["served"] = {"count": value.count, "hash": value.hex()}
                entry["ok"] = entry["ok"] and entry["served"] == entry["recomputed"]
            channels.append(entry)
        elif not entry["ok"]:
            bucket = int(f["bucket"])
            entry["bucket"] = bucket
            if bucket >= 0:
                lo, hi = bucket_bounds(network_id, f["channel"], bucket)
                entry.update(lo=lo.hex(), hi=hi.hex())
            ranges.append(entry)
    rows.sort(key=lambda r: r["seq"])
    channels.sort(key=lambda c: c["channel"])
    ranges.sort(key=lambda r: (r["channel"], r["bucket"]))
    ok = bad_rows == 0 and not ranges and all(c["ok"] for c in channels)
    return {
        "ok": ok,
        "network_id": network_id,
        "events": events,
        "bad_rows": bad_rows,
        "rows": rows[:max_rows],
        "bad_ranges": len(ranges) + sum(1 for c in channels if not c["ok"]),
        "ranges": ranges,
        "channels": channels,
    }


def served_hashes(url: str, network_id: int, channels: Iterable[str]) -> dict[str, Sha256a]:
    """What the node answers Recon with for each channel range (SQL ``SUM`` over the lanes)."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return {c: range_hash(conn, *channel_bounds(network_id, c)) for c in channels}
    finally:
        engine.dispose()


def run(
    spark: Any, url: str, network_id: int, *, partitions: int, verify_signatures: bool = False,
    max_rows: int = 1000,
) -> dict[str, Any]:
    """Read, re-hash and report (the body of ``main``, usable with any session)."""
    from spark_jobs.source import read_events, stage_progress

    df = read_events(spark, url, INPUT_COLUMNS, partitions=partitions)
    with stage_progress(spark, "rehash"):
        findings = transform(df, network_id, verify_signatures=verify_signatures)
        wanted = findings.where("level != 'row'").unionByName(
            findings.where("level = 'row'").limit(max_rows))
        rows = [r.asDict() for r in wanted.collect()]
    served = served_hashes(url, network_id, {r["channel"] for r in rows if r["level"] == "channel"})
    return build_report(rows, network_id, served, max_rows=max_rows)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m spark_jobs.rehash",
                                     description="Re-hash every stored event and range.")
    parser.add_argument("--db", required=True, help="node database (SQLAlchemy URL)")
    parser.add_argument("--network-id", type=int, required=True)
    parser.add_argument("--master", default="local[*]", help="spark.master (default local[*])")
    parser.add_argument("--partitions", type=int, default=8, help="JDBC read partitions")
    parser.add_argument("--report", help="write the JSON report to this file")
    parser.add_argument("--verify-signatures", action="store_true",
                        help="also check every event's Ed25519 signature (slow)")
    parser.add_argument("--max-rows", type=int, default=1000, help="rows listed in the report")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from spark_jobs.source import RESULT_PREFIX, build_session, emit_progress

    args = parse_args(argv)
    started = time.monotonic()
    spark = build_session(args.master, "syncnode-rehash", shuffle_partitions=args.partitions)
    try:
        emit_progress("rehash", 0, 1)
        report = run(spark, args.db, args.network_id, partitions=args.partitions,
                     verify_signatures=args.verify_signatures, max_rows=args.max_rows)
    finally:
        spark.stop()
    report["seconds"] = round(time.monotonic() - started, 3)
    text = json.dumps(report, indent=2, sort_keys=True)
    if args.report:
        Path(args.report).write_text(text + "\n", encoding="utf-8")
    for row in report["rows"]:
        print(f"BAD ROW seq={row['seq']} {row['message_id']}: {'; '.join(row['problems'])}",
              file=sys.stderr)
    for rng in report["ranges"] + [c for c in report["channels"] if not c["ok"]]:
        print(f"BAD RANGE {rng['channel']} bucket={rng.get('bucket', '*')} "
              f"[{rng.get('lo', '?')}, {rng.get('hi', '?')}): stored {rng['stored']} "
              f"recomputed {rng['recomputed']}", file=sys.stderr)
    summary = {k: report[k] for k in ("ok", "events", "bad_rows", "bad_ranges", "seconds")}
    emit_progress("rehash", 1, 1)
    print(RESULT_PREFIX + json.dumps({"job": "rehash", **summary}, sort_keys=True), flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    # Run the imported module, not __main__: Spark pickles functions by module reference.
    from spark_jobs import rehash as _job

    raise SystemExit(_job.main())
