"""Snapshot builds (record stream files + manifest), incremental chains and bootstraps."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, select

from node.cli import records as cli_records
from node.snapshots.bootstrap import BootstrapError, bootstrap, pull
from spark_jobs import snapshot
from spark_jobs.testlog import build_log
from storage import events, make_engine
from storage.snapshot_files import iter_leaf_entries, load_manifest
from sync.recordstream import verify_tree
from tests.spark_jobs.conftest import (
    NETWORK_ID,
    PERIOD_MS,
    SPEC,
    fresh_db,
    shared_log,
    snapshot_rules,
)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and p.name.endswith((".rcd.gz", ".rcd_sig"))}


def _snapshot(spark: Any, url: str, out: Path, key_file: Path) -> dict[str, Any]:
    return snapshot.run(spark, url, out, snapshot.load_node_key(key_file), NETWORK_ID,
                        period_ms=PERIOD_MS, include_open=True, partitions=3)


@pytest.fixture(scope="module")
def built(spark: Any, tmp_path_factory: pytest.TempPathFactory, template_db: Path) -> Path:
    """One snapshot of the SQLite template log, shared by the read-only tests."""
    tmp = tmp_path_factory.mktemp("snap")
    key_file = tmp / "identity.key"
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
    )

    from spark_jobs.testlog import test_key

    key_file.write_bytes(test_key("snapshot-node", 0).private_bytes(
        Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    out = tmp / "snapshot"
    summary = _snapshot(spark, f"sqlite:///{template_db}", out, key_file)
    assert summary["new_events"] == SPEC.events
    return out


def test_snapshot_verifies_with_records_verify(built: Path, capsys: pytest.CaptureFixture[str]
                                               ) -> None:
    assert cli_records.main(["verify", str(built), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"]
    kinds = [f["kind"] for f in report["files"]]
    manifest = load_manifest(built)
    assert manifest is not None
    assert kinds.count("record") == kinds.count("signature") == kinds.count("sidecar") == len(
        manifest.files) == 5
    statuses = {c["name"]: c["status"] for f in report["files"] if f["kind"] == "signature"
                for c in f["checks"]}
    assert statuses["file_signature"] == statuses["metadata_signature"] == "ok"
    assert manifest.count == SPEC.events
    assert sum(f.count for f in manifest.files) == SPEC.events
    # The tree lists every event once, in key order, pointing at its file and item.
    entries = list(iter_leaf_entries(built, manifest.root))
    assert len(entries) == SPEC.events
    assert [e.key for e in entries] == sorted(e.key for e in entries)


def test_bootstrap_gives_an_identical_log(built: Path, template_db: Path, backend: str,
                                          tmp_path: Path) -> None:
    target = fresh_db(backend, tmp_path, None, "fresh.db")
    result = bootstrap(make_engine(target), built, NETWORK_ID, rules=snapshot_rules())
    assert result.events == SPEC.events
    assert shared_log(target) == shared_log(f"sqlite:///{template_db}")
    with pytest.raises(BootstrapError, match="not empty"):
        bootstrap(make_engine(target), built, NETWORK_ID, rules=snapshot_rules())


def test_bootstrap_refuses_a_tampered_snapshot(built: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    manifest = load_manifest(copy)
    assert manifest is not None
    sig = copy / manifest.files[2].signature
    sig.unlink()
    target = fresh_db("sqlite", tmp_path, None, "fresh.db")
    with pytest.raises(BootstrapError, match="no valid signature"):
        bootstrap(make_engine(target), copy, NETWORK_ID, rules=snapshot_rules())
    with pytest.raises(BootstrapError, match="network"):
        bootstrap(make_engine(target), built, NETWORK_ID + 1, rules=snapshot_rules())


def test_pull_fetches_only_differing_ranges(built: Path, template_db: Path, backend: str,
                                            tmp_path: Path) -> None:
    url = fresh_db(backend, tmp_path, template_db)
    full = shared_log(url)
    missing = [full[i][0] for i in (3, 150, 151, 400)]
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(delete(events).where(events.c.recon_key.in_(missing)))
    result = pull(engine, built, NETWORK_ID, rules=snapshot_rules())
    assert result.fetched == len(missing)
    assert len(result.files_read) <= len(missing)
    assert result.subtrees_skipped > 0
    assert shared_log(url) == full
    again = pull(engine, built, NETWORK_ID, rules=snapshot_rules())
    assert again.fetched == 0 and again.nodes_read == 1
    engine.dispose()


def test_incremental_rebuild_continues_the_chain(spark: Any, log_url: str, tmp_path: Path,
                                                 node_key_file: Path) -> None:
    out = tmp_path / "snapshot"
    first = _snapshot(spark, log_url, out, node_key_file)
    before = _files(out)
    build_log(log_url, dataclasses.replace(SPEC, events=240), offset=SPEC.events, processes=1)
    second = _snapshot(spark, log_url, out, node_key_file)

    assert first["new_files"] == 5 and second["new_files"] == 3
    # The first build closed the period 4.0-5.0 s, which the log had filled to 4.8 s: the 20
    # events that arrived for it afterwards are late (Recon's business), the rest are chained.
    assert second["new_events"] == 220 and second["late"] == 20
    assert second["events"] == SPEC.events + 220
    after = _files(out)
    assert {p: after[p] for p in before} == before  # earlier files untouched
    report = verify_tree({f"snapshot/{p}": d for p, d in after.items()}, None)
    assert report.ok
    chains = [c.status for f in report.files if f.kind == "record" for c in f.checks
              if c.name == "chain"]
    assert chains.count("ok") == 7 and chains.count("skip") == 1
    manifest = load_manifest(out)
    assert manifest is not None
    assert [f.block for f in manifest.files] == list(range(8))
    assert manifest.files[5].start_running_hash == manifest.files[4].end_running_hash
    third = _snapshot(spark, log_url, out, node_key_file)
    assert third["new_files"] == 0 and _files(out) == after


# A loading node replicates the log's channels (else their events are refused, as from gossip).
_LOADER_CONFIG = (f"[node]\nnetwork_id = {NETWORK_ID}\n[p2p]\nchannels = {list(SPEC.channels)}\n"
                  f"[spark]\nsnapshot_signers = {sorted(snapshot_rules().signers)}\n"
                  ).replace("'", '"')


def test_bootstrap_and_pull_commands(built: Path, template_db: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    from node.cli import snapshot as cli_snapshot

    config = tmp_path / "node.toml"
    config.write_text(_LOADER_CONFIG)  # the config key names the trusted signer
    data = tmp_path / "data"
    args = ["--data-dir", str(data), "--config", str(config)]
    assert cli_snapshot.main(["bootstrap", "--from-snapshot", str(built), *args]) == 0
    assert f"loaded {SPEC.events} events" in capsys.readouterr().out
    assert shared_log(f"sqlite:///{data / 'syncnode.db'}") == shared_log(f"sqlite:///{template_db}")
    assert cli_snapshot.main(["bootstrap", "--from-snapshot", str(built), *args]) == 1
    assert "not empty" in capsys.readouterr().err
    assert cli_snapshot.main(["snapshot", "pull", str(built), *args]) == 0
    assert "nothing to fetch: the log already holds every event" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_bootstrapped_node_pulls_only_the_rest_through_recon(
        built: Path, template_db: Path, tmp_path: Path) -> None:
    """A node bootstrapped from the snapshot, started against a node that has moved on, fetches
    exactly the events the snapshot lacks (it hears no gossip) and ends with the same log.
    Both nodes run in this process (the test is about the snapshot and Recon, not processes)."""
    import shutil

    from node.cli import snapshot as cli_snapshot
    from tests.harness.cluster import channel_log, metric, publish_many, start_inproc, wait_for

    env = {"SYNCNODE_NODE_NETWORK_ID": str(NETWORK_ID),
           "SYNCNODE_P2P_CHANNELS": ",".join(SPEC.channels)}
    (tmp_path / "source").mkdir()
    shutil.copyfile(template_db, tmp_path / "source" / "syncnode.db")
    source = start_inproc(tmp_path, "source", env=env)
    fresh = None
    try:
        extra = publish_many(source, "general", [f"after the snapshot {k}" for k in range(60)])
        config = tmp_path / "node.toml"
        config.write_text(_LOADER_CONFIG.split("[spark]")[0])
        assert cli_snapshot.main(["bootstrap", "--from-snapshot", str(built),
                                  "--data-dir", str(tmp_path / "fresh"), "--config", str(config),
                                  "--signer", next(iter(snapshot_rules().signers))]) == 0
        fresh = start_inproc(tmp_path, "fresh", bootstrap=[source], env={
            **env, "SYNCNODE_P2P_TEST_DROP_INCOMING_GOSSIP": "1.0",
            "SYNCNODE_RECON_GOSSIP_GRACE_S": "0"})

        def same_logs() -> bool:
            return all(channel_log(fresh, c) == channel_log(source, c) for c in SPEC.channels)

        wait_for(same_logs, 120, "the bootstrapped node did not catch up")
        assert len(channel_log(fresh, "general")) == SPEC.events // 2 + len(extra)
        # Everything else came from the snapshot: Recon fetched the new events only, once.
        assert metric(fresh, "recon_events_fetched_total") == len(extra)
        assert metric(fresh, "events_stored_total") == len(extra)
        assert metric(fresh, "p2p_gossip_received_total") == 0
    finally:
        for node in (fresh, source):
            if node is not None:
                node.kill()


def test_settle_counts_from_the_clock_and_the_result_says_what_waits(
        spark: Any, template_db: Path, tmp_path: Path) -> None:
    from spark_jobs.testlog import test_key

    url = f"sqlite:///{template_db}"
    lamports = sorted(row[4] for row in shared_log(url))
    newest = lamports[-1]
    settle = 2 * PERIOD_MS
    key = test_key("snapshot-node", 0)
    out = tmp_path / "snapshot"
    # Right after the last event: the periods of the last `settle` ms are left out, and the
    # result says how many events that is and when a rebuild will include them.
    first = snapshot.run(spark, url, out, key, NETWORK_ID, period_ms=PERIOD_MS,
                         settle_ms=settle, now_ms=newest, partitions=2)
    open_from = (newest - settle) // PERIOD_MS * PERIOD_MS
    assert first["pending_events"] == sum(1 for x in lamports if x >= open_from) > 0
    assert first["new_events"] + first["pending_events"] == SPEC.events
    assert first["pending_until_ms"] == open_from + PERIOD_MS + settle
    # The log stays quiet: once the clock passed the settle time, the rest is written (the
    # newest event no longer holds its own period back).
    later = max(lamports[-1] + PERIOD_MS + settle, first["pending_until_ms"])
    second = snapshot.run(spark, url, out, key, NETWORK_ID, period_ms=PERIOD_MS,
                          settle_ms=settle, now_ms=later, partitions=2)
    assert second["pending_events"] == 0 and second["pending_until_ms"] is None
    assert second["events"] == SPEC.events and second["late"] == 0


def test_the_hint_says_when_each_left_out_period_settles(template_db: Path) -> None:
    """Events left out in several periods are included period by period, each once it ended
    settle_ms ago: the result (and `snapshot status`) says how many the first rebuild after
    the oldest one's settle time takes, and when all of them are in (not "after T includes
    them" when most wait a period longer)."""
    from node.cli.snapshot import explain_snapshot
    from spark_jobs.testlog import test_key

    url = f"sqlite:///{template_db}"
    lamports = sorted(row[4] for row in shared_log(url))
    settle = lamports[-1] + 1  # nothing has settled: every event is left out, no Spark
    summary = snapshot.begin_build(url, Path("/nonexistent/snapshot"), test_key("snapshot-node", 0),
                                   NETWORK_ID, period_ms=PERIOD_MS, settle_ms=settle,
                                   include_open=False, sidecars=False, max_events_per_file=100,
                                   now_ms=lamports[-1])
    assert isinstance(summary, dict) and summary["pending_events"] == SPEC.events
    oldest_period = lamports[0] // PERIOD_MS
    in_oldest = sum(1 for x in lamports if x // PERIOD_MS == oldest_period)
    assert 0 < in_oldest < SPEC.events
    assert summary["pending_until_ms"] == (oldest_period + 1) * PERIOD_MS + settle
    assert summary["pending_first_events"] == in_oldest
    assert summary["pending_all_until_ms"] == (lamports[-1] // PERIOD_MS + 1) * PERIOD_MS + settle
    # The settle rule itself: a build at each of those times writes exactly what was said.
    for now, written in ((summary["pending_until_ms"] - 1, 0),
                         (summary["pending_until_ms"], in_oldest),
                         (summary["pending_all_until_ms"], SPEC.events)):
        end = snapshot.end_period(lamports[-1], now, PERIOD_MS, settle)
        assert sum(1 for x in lamports if x // PERIOD_MS < end) == written
    left = explain_snapshot({"events": 0, "files": 0, **summary})[1]
    assert f"left out: {SPEC.events} events" in left
    assert f"includes {in_oldest} of them, one after " in left and "all of them" in left


@pytest.mark.parametrize("sidecars", [False, True])
def test_split_periods_match_the_plain_writer_byte_for_byte(
        spark: Any, template_db: Path, tmp_path: Path, node_key_file: Path, sidecars: bool
) -> None:
    """Periods of 100 events cut into files of at most 40: the job and the one-process writer
    give the same bytes (files, sidecars, signatures, tree nodes, manifest), the chain verifies
    and a fresh node bootstraps from it."""
    from spark_jobs.plain_snapshot import run_plain

    key = snapshot.load_node_key(node_key_file)
    url = f"sqlite:///{template_db}"
    options: dict[str, Any] = {"period_ms": PERIOD_MS, "include_open": True,
                               "sidecars": sidecars, "max_events_per_file": 40}
    job = snapshot.run(spark, url, f"file://{tmp_path / 'job'}", key, NETWORK_ID,
                       partitions=3, **options)
    plain = run_plain(url, tmp_path / "plain", key, NETWORK_ID, **options)
    assert set(job.pop("phases")) == {"read_encode_fold", "write_files", "sign", "tree",
                                      "manifest"}
    assert job == {**plain, "out": str(tmp_path / "job")}

    def tree(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
                if p.is_file()}

    files = tree(tmp_path / "job")
    assert files == tree(tmp_path / "plain")
    assert not any(".build" in p or p.endswith(".tmp") for p in files)
    manifest = load_manifest(tmp_path / "job")
    assert manifest is not None
    # 480 events, one every 10 ms: 5 periods (100, 100, 100, 100, 80 events) of 3 files each.
    assert [f.count for f in manifest.files] == [40, 40, 20] * 4 + [40, 40]
    assert [f.block for f in manifest.files] == list(range(14))
    assert [f.period for f in manifest.files][:4] == [manifest.files[0].period] * 3 + [
        manifest.files[0].period + 1]
    assert all(a.first_consensus_ns < b.first_consensus_ns
               for a, b in zip(manifest.files, manifest.files[1:], strict=False))
    assert verify_tree({p: d for p, d in files.items() if p.startswith("record")}, None).ok
    target = fresh_db("sqlite", tmp_path, None, "fresh.db")
    loaded = bootstrap(make_engine(target), tmp_path / "job", NETWORK_ID, rules=snapshot_rules())
    assert loaded.events == SPEC.events
    assert shared_log(target) == shared_log(url)


def test_events_sharing_a_millisecond_are_ranked_across_files(
        spark: Any, tmp_path: Path, node_key_file: Path) -> None:
    """Five events per millisecond, files of 7 events: millisecond groups straddle files and
    periods. Every item's consensus time is ``lamport * 10^6 + rank`` with rank its place in
    (lamport, message_id) order, the files follow that order, and the job equals the plain
    writer byte for byte."""
    from spark_jobs.plain_snapshot import run_plain
    from spark_jobs.testlog import LogSpec
    from sync.recordstream import decode_record_file, record_consensus_ns

    url = f"sqlite:///{tmp_path / 'dense.db'}"
    build_log(url, LogSpec(events=240, keys=3, network_id=NETWORK_ID, step_s=0.0002),
              processes=1)
    key = snapshot.load_node_key(node_key_file)
    options: dict[str, Any] = {"period_ms": 20, "include_open": True, "sidecars": False,
                               "max_events_per_file": 7}
    job = snapshot.run(spark, url, tmp_path / "job", key, NETWORK_ID, partitions=3, **options)
    run_plain(url, tmp_path / "plain", key, NETWORK_ID, **options)
    assert job["events"] == 240
    assert _files(tmp_path / "job") == _files(tmp_path / "plain")

    engine = make_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(events.c.lamport, events.c.wire)
                            .order_by(events.c.lamport, events.c.message_id)).all()
    engine.dispose()
    expected, rank = [], 0
    for i, (lamport, wire) in enumerate(rows):
        rank = rank + 1 if i and rows[i - 1][0] == lamport else 0
        expected.append((lamport * 1_000_000 + rank, bytes(wire)))
    assert max(ns % 1_000_000 for ns, _w in expected) >= 3  # milliseconds shared by 4+ events
    manifest = load_manifest(tmp_path / "job")
    assert manifest is not None
    written = []
    for entry in manifest.files:
        message = decode_record_file((tmp_path / "job" / entry.path).read_bytes(),
                                     entry.path).message
        written += [(record_consensus_ns(item.record, entry.path), item.transaction)
                    for item in message.record_stream_items]
    assert written == expected
    periods: dict[int, int] = {}
    for lamport, _wire in rows:
        periods[lamport // 20] = periods.get(lamport // 20, 0) + 1
    assert [f.count for f in manifest.files] == [
        n for c in periods.values() for n in [7] * (c // 7) + [c % 7] * (c % 7 > 0)]
    assert len(periods) >= 3
