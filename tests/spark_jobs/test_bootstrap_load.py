"""The bootstrap's load: files verified in worker processes, one transaction per file, and a
bad file (or a bad event inside a properly signed file) loads nothing at all.

Snapshots here come from the plain writer (``spark_jobs.plain_snapshot``: the job's bytes, no
Spark session needed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from node.snapshots.bootstrap import BootstrapError, LoadRules, bootstrap, pull
from spark_jobs import testlog
from spark_jobs.plain_snapshot import run_plain
from storage import count_events, events, make_engine
from storage.snapshot_files import load_manifest
from sync.gossip import SenderPolicy
from sync.ingest import EventRules
from tests.conftest import ROOT
from tests.spark_jobs.conftest import (
    NETWORK_ID,
    PERIOD_MS,
    SPEC,
    fresh_db,
    shared_log,
    snapshot_rules,
)


def _plain(url: str, out: Path) -> Path:
    summary = run_plain(url, out, testlog.test_key("snapshot-node", 0), NETWORK_ID,
                        period_ms=PERIOD_MS, include_open=True)
    assert summary["events"] == SPEC.events
    return out


@pytest.fixture(scope="module")
def plain_snapshot(tmp_path_factory: pytest.TempPathFactory, template_db: Path) -> Path:
    return _plain(f"sqlite:///{template_db}", tmp_path_factory.mktemp("plain") / "snapshot")


def _by_seq(url: str) -> list[tuple[Any, ...]]:
    engine = make_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(events.c.seq, events.c.message_id)
                            .order_by(events.c.seq)).all()
    engine.dispose()
    return [tuple(r) for r in rows]


def _count(url: str) -> int:
    engine = make_engine(url)
    with engine.connect() as conn:
        n = count_events(conn)
    engine.dispose()
    return n


@pytest.mark.parametrize("workers", [0, 2])
def test_workers_load_the_same_log_in_consensus_order(
        plain_snapshot: Path, template_db: Path, backend: str, tmp_path: Path,
        workers: int) -> None:
    target = fresh_db(backend, tmp_path, None, "fresh.db")
    result = bootstrap(make_engine(target), plain_snapshot, NETWORK_ID, rules=snapshot_rules(),
                       workers=workers)
    assert (result.events, result.files) == (SPEC.events, 5)
    assert shared_log(target) == shared_log(f"sqlite:///{template_db}")
    # seq follows the files (consensus order), whoever verified them.
    manifest = load_manifest(plain_snapshot)
    assert manifest is not None
    seqs = _by_seq(target)
    assert [s for s, _ in seqs] == list(range(seqs[0][0], seqs[0][0] + SPEC.events))
    engine = make_engine(target)
    with engine.connect() as conn:
        order = [m for (m,) in conn.execute(select(events.c.message_id)
                                            .order_by(events.c.lamport, events.c.message_id))]
    engine.dispose()
    assert [m for _, m in seqs] == order


def test_a_bad_file_after_loaded_ones_leaves_the_database_empty(
        plain_snapshot: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(plain_snapshot, copy)
    manifest = load_manifest(copy)
    assert manifest is not None
    bad = copy / manifest.files[3].path
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    target = fresh_db("sqlite", tmp_path, None, "fresh.db")
    with pytest.raises(BootstrapError, match=manifest.files[3].path):
        bootstrap(make_engine(target), copy, NETWORK_ID, rules=snapshot_rules(), workers=2)
    assert _count(target) == 0
    # The database is still empty, so the good snapshot loads into it.
    assert bootstrap(make_engine(target), plain_snapshot, NETWORK_ID, rules=snapshot_rules(),
                     workers=2).events == SPEC.events


def test_an_event_with_a_bad_signature_in_a_signed_file_is_refused(
        template_db: Path, tmp_path: Path) -> None:
    """The node signed the file, but one event's own signature does not verify: the workers'
    per-event check refuses the snapshot, and nothing stays."""
    url = fresh_db("sqlite", tmp_path, template_db, "tampered-source.db")
    engine = make_engine(url)
    with engine.begin() as conn:
        seq, wire = conn.execute(select(events.c.seq, events.c.wire).order_by(events.c.seq)
                                 .offset(SPEC.events - 10).limit(1)).one()
        wire = bytearray(wire)
        wire[-5] ^= 0x01  # inside the Ed25519 signature at the end of the wire
        conn.execute(update(events).where(events.c.seq == seq).values(wire=bytes(wire)))
    engine.dispose()
    snap = _plain(url, tmp_path / "snapshot")
    target = fresh_db("sqlite", tmp_path, None, "fresh.db")
    with pytest.raises(BootstrapError, match=r"\.rcd\.gz: bad signature"):
        bootstrap(make_engine(target), snap, NETWORK_ID, rules=snapshot_rules(), workers=2)
    assert _count(target) == 0


@pytest.mark.parametrize("workers", [0, 2])
def test_events_of_a_channel_this_node_does_not_replicate_are_left_out_and_told(
        plain_snapshot: Path, template_db: Path, tmp_path: Path, workers: int) -> None:
    """A group that uses a channel this node has not enabled (the database, block streams):
    the node loads the channels it replicates and says what it left out, rather than refusing
    the whole snapshot; ``snapshot pull`` takes the rest once the channel is enabled."""
    signer = next(iter(snapshot_rules().signers))
    only_general = LoadRules.open([signer], ("general",), time.time())
    target = fresh_db("sqlite", tmp_path, None, "fresh.db")
    result = bootstrap(make_engine(target), plain_snapshot, NETWORK_ID, rules=only_general,
                       workers=workers)
    per_channel = SPEC.events // len(SPEC.channels)
    assert (result.events, result.left_out) == (per_channel, {"blocks": per_channel})
    assert _count(target) == per_channel
    assert {row[2] for row in shared_log(target)} == {"general"}
    # Enabled later: the pull adds exactly the events left out.
    pulled = pull(make_engine(target), plain_snapshot, NETWORK_ID, rules=snapshot_rules())
    assert (pulled.fetched, pulled.left_out) == (per_channel, {})
    assert shared_log(target) == shared_log(f"sqlite:///{template_db}")


def test_events_refused_for_another_reason_still_refuse_the_snapshot(
        plain_snapshot: Path, tmp_path: Path) -> None:
    """Leaving out is for channels this node does not run; an event it would refuse from a peer
    (here: a sender outside the closed group) refuses the snapshot as before."""
    signer = next(iter(snapshot_rules().signers))
    closed = LoadRules(frozenset([signer]), EventRules(
        frozenset(["general"]), SenderPolicy("", frozenset([signer])), 600_000), time.time())
    target = fresh_db("sqlite", tmp_path, None, "fresh.db")
    with pytest.raises(BootstrapError, match="refused as it would be from a peer: sender not in"):
        bootstrap(make_engine(target), plain_snapshot, NETWORK_ID, rules=closed, workers=0)
    assert _count(target) == 0


def test_the_bootstrap_command_says_what_it_left_out_and_how_to_take_it(
        plain_snapshot: Path, tmp_path: Path) -> None:
    signer = next(iter(snapshot_rules().signers))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNCNODE_")}
    env.update(PYTHONPATH=str(ROOT), SYNCNODE_P2P_CHANNELS="general",
               SYNCNODE_NODE_NETWORK_ID=str(NETWORK_ID))
    done = subprocess.run(
        [sys.executable, "-m", "node.cli", "bootstrap", "--from-snapshot", str(plain_snapshot),
         "--data-dir", str(tmp_path / "n"), "--signer", signer, "--workers", "0"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    half = SPEC.events // 2
    assert f"loaded {half} events from 5 record files" in done.stdout
    assert (f"left out {half} events of channel 'blocks' (this node does not replicate it): "
            "to take them, set SYNCNODE_BLOCKS_ENABLED=true (or [blocks] enabled = true, with "
            f"blocks.producers) and run `syncnode snapshot pull {plain_snapshot}`"
            ) in done.stdout, done.stdout
