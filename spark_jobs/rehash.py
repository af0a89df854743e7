"""``rehash``: recompute every stored event's digest, Recon key and Sha256a lanes from its wire.

Per event, from the signed wire bytes alone: the SDS digest of the stable fields (must equal the
wire's own message id and the stored ``message_id``), channel / sender / Lamport time (must equal
the stored columns), the Recon key ``event_key(network_id, ...)`` (must equal ``recon_key``) and
the 8 Sha256a lanes of that key (must equal ``lane0..lane7``). Per range the node serves, per
channel and per key bucket (the channel's key prefix plus one more byte, 256 buckets per channel),
the Sha256a and count of the stored lanes are compared with the recomputed ones.

One pass does the work: an Arrow UDF (``RowChecker.check_batches``: column batches, no per-row
pickling) says per event whether everything agrees, and the JVM adds up the stored lanes of the
agreeing events per (channel, bucket) in one small aggregation (``transform``). Only when that
pass counts disagreeing events does a second job pick them out and explain them in Python
(``explain_rows``). ``RowChecker.partition`` is the same re-hash as one plain loop (the
benchmark's single-process baseline).

``python -m spark_jobs.rehash --db URL --network-id N [--master M] [--report FILE]`` exits 0
when everything agrees, 1 when something disagrees (listed in the report), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs.source import DEFAULT_DRIVER_MEMORY
from storage import LANE_COLUMNS, make_engine, range_hash
from sync.errors import RemoteProtocolError
from sync.recon.eventid import (
    CIP124_DRAFT,
    LAYOUTS,
    cbor_uint,
    channel_bounds,
    event_cid,
    prefix_successor,
    stream_prefix,
)
from sync.recon.sha256a import MASK32, Sha256a, lanes_of
from sync.sds import decode_event, event_digest, sds_pb2

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "INPUT_COLUMNS",
    "RowChecker",
    "bad_partials",
    "bucket_bounds",
    "bucket_of",
    "build_report",
    "explain_rows",
    "findings_of",
    "main",
    "run",
    "transform",
]

INPUT_COLUMNS = ("seq", "recon_key", "message_id", "channel", "sender", "lamport", "wire",
                 *LANE_COLUMNS)
#: What the per-event check reads, in ``RowChecker.agrees`` argument order (lanes last).
CHECK_COLUMNS = ("wire", "message_id", "channel", "sender", "lamport", "recon_key", *LANE_COLUMNS)
_CID_HEAD = event_cid(bytes(32))[:-32]
_WIRE_LIMIT = 1 << 20
_LANES = struct.Struct("<8I")
_sha256 = hashlib.sha256
_Message = sds_pb2.Message
# Sides of a partial sum: rows whose stored and recomputed values agree count once for both.
BOTH, STORED, COMPUTED = "both", "stored", "computed"


@lru_cache(maxsize=65536)
def _prefix(network_id: int, channel: str, sender: str | None) -> bytes:
    return stream_prefix(network_id, channel, sender)


def _cbor_uint(value: int) -> bytes:
    """``cbor_uint`` without its loop (called once per event); Lamport times are uint64."""
    if value < 24:
        return bytes((value,))
    if value < 0x1_0000_0000:
        return cbor_uint(value)
    return b"\x1b" + value.to_bytes(8, "big")


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
    #: The network's eventId layout: the ceramic-one keys carry no Lamport time.
    layout: str = CIP124_DRAFT
    #: Channels of the "waku" SDS profile: id = sha256(payload), no signature.
    waku_channels: frozenset[str] = frozenset()

    def _digest(self, channel: str, sender: str, lamport: int, history: Any,
                content: bytes) -> bytes:
        if channel in self.waku_channels:
            return _sha256(content).digest()
        return event_digest(channel, sender, lamport, [h.message_id for h in history], content)

    def _signature_ok(self, wire: bytes, channel: str) -> str | None:
        """None, or why the signature fails (never checked on a waku channel)."""
        if not self.verify_signatures or channel in self.waku_channels:
            return None
        try:
            decode_event(wire, verify_signature=True)
        except RemoteProtocolError as exc:
            return str(exc)
        return None

    def agrees(self, wire: bytes, mid: str, channel: str, sender: str, lamport: int, key: bytes,
               lanes: tuple[int, ...]) -> bool:
        """True when every check of ``problems`` passes: the fast path, run once per event.

        Builds no strings and no lists of problems; a ``False`` is explained by ``problems``.
        """
        if len(wire) > _WIRE_LIMIT:
            return False
        msg = _Message()
        try:
            msg.ParseFromString(wire)
        except Exception:  # any decoder error: explained by ``problems`` later
            return False
        if (not msg.HasField("lamport_timestamp") or msg.channel_id != channel
                or msg.sender_id != sender or msg.lamport_timestamp != lamport):
            return False
        digest = self._digest(channel, sender, lamport, msg.causal_history, msg.content)
        hexd = digest.hex()
        if hexd != mid or hexd != msg.message_id:
            return False
        height = _cbor_uint(lamport) if self.layout == CIP124_DRAFT else b""
        if key != _prefix(self.network_id, channel, sender) + height + _CID_HEAD + digest:
            return False
        if _LANES.unpack(_sha256(key).digest()) != lanes:
            return False
        return self._signature_ok(wire, channel) is None

    def check_batches(self, batches: Iterator[tuple[Any, ...]]) -> Iterator[Any]:
        """The Arrow UDF body: per batch of ``CHECK_COLUMNS`` arrays, a boolean array saying
        which events agree. Whole columns become Python lists at once (no per-row pickling)."""
        import pyarrow as pa

        agrees = self.agrees
        for cols in batches:
            wire, mid, channel, sender, lamport, key = (c.to_pylist() for c in cols[:6])
            lanes = zip(*(c.to_pylist() for c in cols[6:14]), strict=True)
            yield pa.array(list(map(agrees, wire, mid, channel, sender, lamport, key, lanes)),
                           type=pa.bool_())

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
        digest = self._digest(w_channel, w_sender, w_lamport, msg.causal_history, msg.content)
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
        height = cbor_uint(w_lamport) if self.layout == CIP124_DRAFT else b""
        computed = _prefix(self.network_id, w_channel, w_sender) + height + _CID_HEAD + digest
        lanes = lanes_of(computed)
        if key != computed:
            out.append(f"recon_key: stored {bytes(key).hex()}, recomputed {computed.hex()}")
        elif stored_lanes != lanes:
            out.extend(
                f"{LANE_COLUMNS[i]}: stored {stored_lanes[i]}, recomputed {lanes[i]}"
                for i in range(8) if stored_lanes[i] != lanes[i]
            )
        failure = None if out else self._signature_ok(wire, w_channel)
        if failure is not None:
            out.append(f"signature: {failure}")
        return out, w_channel, computed, lanes

    def explain(self, *row: Any) -> tuple[str, int, str | None, int, list[int] | None]:
        """(problems as JSON, bucket of the stored key, recomputed channel, bucket of the
        recomputed key, its lanes) of a row (``INPUT_COLUMNS``) that failed ``agrees``."""
        problems, channel, key, lanes = self.problems(row)
        stored_bucket = bucket_of(self.network_id, row[3], bytes(row[1]))
        if channel is None or key is None or lanes is None:
            return json.dumps(problems), stored_bucket, None, -1, None
        return (json.dumps(problems), stored_bucket, channel,
                bucket_of(self.network_id, channel, key), list(lanes))

    def partition(self, rows: Iterable[Sequence[Any]]) -> Iterator[tuple[Any, ...]]:
        """The whole re-hash of a sequence of rows in plain Python: problem rows, then partial
        sums per side and bucket (tuples following ``PARTIAL_FIELDS``)."""
        sums: dict[tuple[str, str, int], _Acc] = {}
        nid = self.network_id
        agrees = self.agrees
        for row in rows:
            lanes = tuple(row[7:15])
            channel, key = row[3], row[1]
            if agrees(row[6], row[2], channel, row[4], row[5], key, lanes):
                slot = (BOTH, channel, key[len(_prefix(nid, channel, None))])
                if (acc := sums.get(slot)) is None:
                    acc = sums[slot] = _Acc()
                acc.add(lanes)
                continue
            key = bytes(key)
            problems, w_channel, computed, c_lanes = self.problems(row)
            yield ("row", "", channel, -1, 0, *([0] * 8), int(row[0]), str(row[2]),
                   json.dumps(problems))
            pairs = [(STORED, channel, key, lanes)]
            if w_channel is not None and computed is not None and c_lanes is not None:
                pairs.append((COMPUTED, w_channel, computed, c_lanes))
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


def _bucket_byte(key: Any, network_id: int) -> Any:
    """The byte after the channel prefix (the prefix has the same length for every channel),
    as a 1-byte binary: grouping on it is cheaper than converting it to a number per row."""
    from pyspark.sql import functions as F

    return F.substring(key, len(_prefix(network_id, "", None)) + 1, 1)


def _agree_column(network_id: int, verify_signatures: bool, layout: str,
                  waku_channels: frozenset[str]) -> Any:
    """The Arrow UDF column: true when the event agrees with its wire in every respect."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.functions import ArrowUDFType, arrow_udf

    checker = RowChecker(network_id, verify_signatures, layout, waku_channels)
    with warnings.catch_warnings():
        # pyspark prefers type hints; an explicit SCALAR_ITER type works without pandas.
        warnings.simplefilter("ignore", UserWarning)
        udf = arrow_udf(checker.check_batches, "boolean", ArrowUDFType.SCALAR_ITER)
    return udf(*(F.col(c) for c in CHECK_COLUMNS))


def transform(df: DataFrame, network_id: int, *, verify_signatures: bool = False,
              layout: str = CIP124_DRAFT, waku_channels: frozenset[str] = frozenset()
              ) -> DataFrame:
    """Events (``INPUT_COLUMNS``) -> one row per (stored channel, bucket byte of the stored key,
    ``agrees``): ``count`` and ``l0..l7`` (sums of the stored lanes, not reduced mod 2^32).

    One read of the log, one Arrow UDF pass and one small aggregation: the rows that agree
    give both sides of every range sum; the ``agrees = false`` groups only count the events
    that ``explain_rows`` must look at (their sums are ignored: their buckets are recomputed
    exactly there, in Python).
    """
    from pyspark.sql import functions as F

    return (
        df.select(F.col("channel"), _bucket_byte(F.col("recon_key"), network_id).alias("bucket"),
                  _agree_column(network_id, verify_signatures, layout, waku_channels
                                ).alias("agrees"),
                  *(F.col(n).alias(f"l{i}") for i, n in enumerate(LANE_COLUMNS)))
        .groupBy("channel", "bucket", "agrees")
        .agg(F.count(F.lit(1)).alias("count"), *(F.sum(f"l{i}").alias(f"l{i}") for i in range(8)))
    )


def explain_rows(df: DataFrame, network_id: int, *, verify_signatures: bool = False,
                 layout: str = CIP124_DRAFT, waku_channels: frozenset[str] = frozenset()
                 ) -> DataFrame:
    """The events that do not agree, explained: ``seq``, ``message_id``, ``channel``,
    ``problems`` (JSON list), ``x`` (stored bucket, recomputed channel / bucket / lanes)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        ArrayType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    checker = RowChecker(network_id, verify_signatures, layout, waku_channels)
    explain = F.udf(checker.explain, useArrow=False, returnType=StructType([
        StructField("problems", StringType()), StructField("stored_bucket", IntegerType()),
        StructField("channel", StringType()), StructField("bucket", IntegerType()),
        StructField("lanes", ArrayType(LongType()))]))
    return (
        df.select(*INPUT_COLUMNS)
        .where(~_agree_column(network_id, verify_signatures, layout, waku_channels))
        .select("seq", "message_id", "channel", *LANE_COLUMNS, explain(*INPUT_COLUMNS).alias("x"))
    )


def bad_partials(explained: DataFrame) -> DataFrame:
    """Per (side, channel, bucket): count and lane sums of the disagreeing events, with their
    stored values (side ``stored``) and their recomputed ones (side ``computed``)."""
    from pyspark.sql import functions as F

    stored = explained.select(
        F.lit(STORED).alias("side"), "channel", F.col("x.stored_bucket").alias("bucket"),
        *(F.col(n).alias(f"l{i}") for i, n in enumerate(LANE_COLUMNS)))
    computed = explained.where(F.col("x.channel").isNotNull()).select(
        F.lit(COMPUTED).alias("side"), F.col("x.channel").alias("channel"),
        F.col("x.bucket").alias("bucket"),
        *(F.col("x.lanes")[i].alias(f"l{i}") for i in range(8)))
    return stored.unionByName(computed).groupBy("side", "channel", "bucket").agg(
        F.count(F.lit(1)).alias("count"), *(F.sum(f"l{i}").alias(f"l{i}") for i in range(8)))


def findings_of(
    good: Iterable[tuple[str, int, int, Sequence[int]]],
    bad: Iterable[tuple[str, str, int, int, Sequence[int]]] = (),
    rows: Iterable[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Findings (``build_report``'s input) from the agreeing sums ``(channel, bucket, count,
    lanes)``, the disagreeing partial sums ``(side, channel, bucket, count, lanes)`` and the
    explained rows. Per bucket and per channel: stored side = agreeing + ``stored`` partials,
    recomputed side = agreeing + ``computed`` partials, lanes mod 2^32."""
    acc: dict[tuple[str, str, int], list[list[int]]] = {}

    def add(channel: str, bucket: int, sides: tuple[int, ...], count: int,
            lanes: Sequence[int]) -> None:
        # The bucket and its channel (a bad stored key may lie in no bucket: bucket -1).
        for key in (("bucket", channel, bucket), ("channel", channel, -1)):
            slot = acc.setdefault(key, [[0] * 9, [0] * 9])
            for s in sides:
                slot[s][0] += count
                for i in range(8):
                    slot[s][i + 1] += lanes[i]

    for channel, bucket, count, lanes in good:
        add(channel, bucket, (0, 1), count, lanes)
    for side, channel, bucket, count, lanes in bad:
        add(channel, bucket, (0,) if side == STORED else (1,), count, lanes)
    out = [{"level": "row", "channel": r["channel"], "bucket": -1, "seq": r["seq"],
            "message_id": r["message_id"], "problems": r["problems"], "ok": False}
           for r in rows]
    for (level, channel, bucket), (stored, computed) in acc.items():
        s_lanes = [v & MASK32 for v in stored[1:]]
        c_lanes = [v & MASK32 for v in computed[1:]]
        out.append({"level": level, "channel": channel,
                    "bucket": bucket, "seq": None, "message_id": None, "problems": None,
                    "stored_count": stored[0], "computed_count": computed[0],
                    "stored_lanes": s_lanes, "computed_lanes": c_lanes,
                    "ok": stored[0] == computed[0] and s_lanes == c_lanes})
    return out


def _hash_entry(count: int, lanes: Sequence[int]) -> dict[str, Any]:
    return {"count": int(count), "hash": Sha256a(tuple(int(v) for v in lanes), count).hex()}


def build_report(
    findings: Iterable[Any],
    network_id: int,
    served: dict[str, Sha256a] | None = None,
    *,
    max_rows: int = 1000,
    bad_rows: int | None = None,
) -> dict[str, Any]:
    """The JSON report from collected findings (and, optionally, the SQL range hashes served).

    ``ranges`` lists only disagreeing buckets; ``channels`` lists every channel. ``bad_rows``:
    the number of disagreeing events when the findings list only some of them.
    """
    total_bad = bad_rows
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
    if total_bad is not None:
        bad_rows = max(total_bad, bad_rows)
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
    max_rows: int = 1000, layout: str = CIP124_DRAFT,
    waku_channels: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Read, re-hash and report (the body of ``main``, usable with any session).

    One Spark job on a clean log; a second one, over the same read, only when the first counted
    disagreeing events (it picks them out, explains them and sums both of their sides).
    """
    from pyspark import StorageLevel

    from spark_jobs.source import read_events, stage_progress

    df = read_events(spark, url, INPUT_COLUMNS, partitions=partitions)
    good: list[tuple[str, int, int, list[int]]] = []
    partials: list[tuple[str, str, int, int, list[int]]] = []
    rows: list[dict[str, Any]] = []
    n_bad = 0
    with stage_progress(spark, "rehash"):
        for r in transform(df, network_id, verify_signatures=verify_signatures,
                           layout=layout, waku_channels=waku_channels).collect():
            if r["agrees"]:
                bucket = r["bucket"][0] if r["bucket"] else -1
                good.append((r["channel"], bucket, r["count"], [r[f"l{i}"] for i in range(8)]))
            else:
                n_bad += int(r["count"])
        if n_bad:
            # Persisted: the partial sums and the listed rows both read this one explanation.
            explained = explain_rows(df, network_id, verify_signatures=verify_signatures,
                                     layout=layout, waku_channels=waku_channels
                                     ).persist(StorageLevel.MEMORY_AND_DISK)
            try:
                partials = [(r["side"], r["channel"], r["bucket"], r["count"],
                             [r[f"l{i}"] for i in range(8)])
                            for r in bad_partials(explained).collect()]
                rows = [{"seq": r["seq"], "message_id": r["message_id"],
                         "channel": r["channel"], "problems": r["x"]["problems"]}
                        for r in explained.select("seq", "message_id", "channel", "x")
                        .limit(max_rows).collect()]
            finally:
                explained.unpersist()
    findings = findings_of(good, partials, rows)
    served = served_hashes(url, network_id, {f["channel"] for f in findings
                                             if f["level"] == "channel"})
    return build_report(findings, network_id, served, max_rows=max_rows, bad_rows=n_bad)


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
    parser.add_argument("--event-id-layout", choices=LAYOUTS, default=CIP124_DRAFT,
                        help="the network's Recon key layout ([recon] event_id_layout)")
    parser.add_argument("--waku-channels", default="",
                        help="comma-separated channels of the waku SDS profile")
    parser.add_argument("--driver-memory", default=DEFAULT_DRIVER_MEMORY,
                        help=f"spark.driver.memory (default {DEFAULT_DRIVER_MEMORY})")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from spark_jobs.source import RESULT_PREFIX, build_session, emit_progress

    args = parse_args(argv)
    started = time.monotonic()
    spark = build_session(args.master, "syncnode-rehash", shuffle_partitions=args.partitions,
                          extra={"spark.driver.memory": args.driver_memory})
    try:
        emit_progress("rehash", 0, 1)
        report = run(spark, args.db, args.network_id, partitions=args.partitions,
                     verify_signatures=args.verify_signatures, max_rows=args.max_rows,
                     layout=args.event_id_layout,
                     waku_channels=frozenset(filter(None, args.waku_channels.split(","))))
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
