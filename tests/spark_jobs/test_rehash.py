"""The rehash job on a local[2] session: a clean log passes, damage is found and named."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update

from spark_jobs import rehash
from storage import events, make_engine
from tests.spark_jobs.conftest import NETWORK_ID, SPEC


def _run(spark: Any, url: str) -> dict[str, Any]:
    return rehash.run(spark, url, NETWORK_ID, partitions=3)


def _row(url: str, seq: int) -> Any:
    engine = make_engine(url)
    with engine.connect() as conn:
        row = conn.execute(select(events).where(events.c.seq == seq)).one()
    engine.dispose()
    return row


def _update(url: str, seq: int, **values: Any) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(update(events).where(events.c.seq == seq).values(**values))
    engine.dispose()


def test_clean_log_passes(spark: Any, log_url: str) -> None:
    report = _run(spark, log_url)
    assert report["ok"], report
    assert report["events"] == SPEC.events
    assert report["bad_rows"] == 0 and report["ranges"] == []
    assert {c["channel"] for c in report["channels"]} == set(SPEC.channels)
    for channel in report["channels"]:
        assert channel["stored"] == channel["recomputed"] == channel["served"]


def test_flipped_byte_and_wrong_lane_are_named(spark: Any, log_url: str) -> None:
    flipped, laned = 17, 203
    wire = bytearray(_row(log_url, flipped).wire)
    wire[-70] ^= 0x01  # inside the content: the digest no longer matches the message id
    _update(log_url, flipped, wire=bytes(wire))
    bad = _row(log_url, laned)
    _update(log_url, laned, lane5=(bad.lane5 + 1) % 2**32)

    report = _run(spark, log_url)

    assert not report["ok"]
    by_seq = {r["seq"]: r for r in report["rows"]}
    assert set(by_seq) == {flipped, laned}
    flip_problems = " ".join(by_seq[flipped]["problems"])
    assert "digest:" in flip_problems and "recon_key:" in flip_problems
    assert by_seq[laned]["problems"] == [
        f"lane5: stored {(bad.lane5 + 1) % 2**32}, recomputed {bad.lane5}"
    ]
    # The ranges holding the two events disagree, and only those.
    bad_buckets = {(r["channel"], r["bucket"]) for r in report["ranges"]}
    expected = {
        (_row(log_url, s).channel, rehash.bucket_of(NETWORK_ID, _row(log_url, s).channel,
                                                    _row(log_url, s).recon_key))
        for s in (flipped, laned)
    }
    assert bad_buckets == expected
    for entry in report["ranges"]:
        lo, hi = rehash.bucket_bounds(NETWORK_ID, entry["channel"], entry["bucket"])
        assert (entry["lo"], entry["hi"]) == (lo.hex(), hi.hex())
        assert entry["stored"] != entry["recomputed"]
    bad_channels = {c["channel"] for c in report["channels"] if not c["ok"]}
    assert bad_channels == {_row(log_url, s).channel for s in (flipped, laned)}
    assert report["bad_ranges"] == len(bad_buckets) + len(bad_channels)


def test_row_checker_matches_the_node_write_path() -> None:
    """The job's fast key recomputation equals node.replication.record_of_event for every event."""
    from spark_jobs.testlog import make_records
    from sync.recon.sha256a import lanes_of

    checker = rehash.RowChecker(NETWORK_ID, verify_signatures=True)
    for i, rec in enumerate(make_records(SPEC)[:60]):
        row = (i, rec.recon_key, rec.message_id, rec.channel, rec.sender, rec.lamport,
               rec.wire, *lanes_of(rec.recon_key))
        problems, channel, key, lanes = checker.problems(row)
        assert problems == [] and channel == rec.channel and key == rec.recon_key
        assert lanes == lanes_of(rec.recon_key)
        garbled = (*row[:6], b"\xff" + rec.wire, *row[7:])
        assert checker.problems(garbled)[0][0].startswith("wire: undecodable")


def test_row_checker_reads_the_network_key_layout() -> None:
    """With ``[recon] event_id_layout = "ceramic-one"`` the keys carry no Lamport time: the
    checker of that layout agrees with the node's write path, the draft checker does not."""
    from spark_jobs.testlog import make_records
    from sync.recon.eventid import CERAMIC_ONE
    from sync.recon.sha256a import lanes_of
    from sync.sds import decode_event
    from sync.stored_event import record_of_event

    one = rehash.RowChecker(NETWORK_ID, layout=CERAMIC_ONE)
    draft = rehash.RowChecker(NETWORK_ID)
    for i, rec in enumerate(make_records(SPEC)[:20]):
        key = record_of_event(NETWORK_ID, decode_event(rec.wire), CERAMIC_ONE).recon_key
        lanes = lanes_of(key)
        row = (i, key, rec.message_id, rec.channel, rec.sender, rec.lamport, rec.wire, *lanes)
        assert one.problems(row)[0] == []
        assert one.agrees(rec.wire, rec.message_id, rec.channel, rec.sender, rec.lamport, key,
                          lanes)
        assert not draft.agrees(rec.wire, rec.message_id, rec.channel, rec.sender, rec.lamport,
                                key, lanes)
        assert draft.problems(row)[0][0].startswith("recon_key:")


def test_row_checker_reads_waku_channels() -> None:
    """Events of a "waku" profile channel are named by their payload hash and unsigned: the
    checker told about the channel agrees with the node's write path, one that is not
    reports the id."""
    from sync.recon.sha256a import lanes_of
    from sync.sds import Delivered, SdsChannel, SdsConfig
    from sync.stored_event import record_of_delivered

    channel = SdsChannel("wk", "some-peer", None, SdsConfig(profile="waku"), now=1_000.0)
    channel.send(b"hello", 1_000.0)
    (ev,) = [e for e in channel.events() if isinstance(e, Delivered)]
    rec = record_of_delivered(NETWORK_ID, "wk", ev)
    row = (0, rec.recon_key, rec.message_id, rec.channel, rec.sender, rec.lamport, rec.wire,
           *lanes_of(rec.recon_key))
    waku = rehash.RowChecker(NETWORK_ID, verify_signatures=True, waku_channels=frozenset({"wk"}))
    assert waku.problems(row)[0] == []
    assert waku.agrees(rec.wire, rec.message_id, "wk", "some-peer", rec.lamport, rec.recon_key,
                       lanes_of(rec.recon_key))
    assert rehash.RowChecker(NETWORK_ID).problems(row)[0][0].startswith("digest:")


def test_job_and_plain_loop_agree_on_a_damaged_log(spark: Any, log_url: str) -> None:
    """The Spark job's report equals the one folded from ``RowChecker.partition`` (the
    benchmark's baseline loop), and ``bad_rows`` counts every bad event even when the report
    lists fewer of them."""
    channel_swapped, laned = 5, 300
    row = _row(log_url, channel_swapped)
    other = next(c for c in SPEC.channels if c != row.channel)
    _update(log_url, channel_swapped, channel=other)
    bad = _row(log_url, laned)
    _update(log_url, laned, lane0=(bad.lane0 + 7) % 2**32)

    report = rehash.run(spark, log_url, NETWORK_ID, partitions=3, max_rows=1)

    engine = make_engine(log_url)
    with engine.connect() as conn:
        cols = [events.c[c] for c in rehash.INPUT_COLUMNS]
        rows = conn.execute(select(*cols).order_by(events.c.seq)).all()
    engine.dispose()
    partials = list(rehash.RowChecker(NETWORK_ID).partition(rows))
    good = [(p[2], p[3], p[4], p[5:13]) for p in partials if p[:2] == ("sum", rehash.BOTH)]
    bad_sums = [(p[1], p[2], p[3], p[4], p[5:13]) for p in partials
                if p[0] == "sum" and p[1] != rehash.BOTH]
    listed = [{"seq": p[13], "message_id": p[14], "channel": p[2], "problems": p[15]}
              for p in partials if p[0] == "row"]
    loop = rehash.build_report(rehash.findings_of(good, bad_sums, listed), NETWORK_ID,
                               max_rows=1)

    assert not report["ok"] and report["bad_rows"] == loop["bad_rows"] == 2
    assert len(report["rows"]) == 1 and report["rows"][0]["seq"] in {channel_swapped, laned}
    assert report["ranges"] == loop["ranges"] and report["ranges"]
    assert [{k: v for k, v in c.items() if k != "served"} | {"ok": c["stored"] == c["recomputed"]}
            for c in report["channels"]] == loop["channels"]
    swapped = next(r for r in [*report["rows"], *loop["rows"]] if r["seq"] == channel_swapped)
    assert any(p.startswith("channel:") for p in swapped["problems"])
