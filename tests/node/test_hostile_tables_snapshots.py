"""Hostile peers, round two (issue 28), with real nodes (run in the test's process) and a real
hostile host:

1. a member's backdated schema declaration does not take a seeded table over (default config,
   but a short ``db.settle_ms`` so that the owner settles in seconds), neither on the nodes that
   had settled its owner nor on a node that joins later (its own window open, the refused
   declaration in the log it catches up on, and the hostile host sending it again);
2. a snapshot is loaded only from a trusted signer, its events are held to the rules gossip
   applies (a far-future one refuses the snapshot), and a node that relays what it loaded is
   not penalised by its peer.
"""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sync.crdt import SchemaDeclaration
from sync.identity import peer_id_of
from tests.harness.cluster import (
    channel_log,
    metric,
    preset_identity,
    start_inproc,
    wait_for,
)
from tests.harness.hostile import gossip
from tests.harness.procs import NodeApi
from tests.harness.snapshots import signed_snapshot
from tests.node.test_hostile_events import signed_event

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TABLES = json.dumps({"users": {"columns": {"name": "text", "n": "integer"}}})
DB_ENV = {"SYNCNODE_DB_TABLES": TABLES, "SYNCNODE_DB_SETTLE_MS": "2000"}
YEAR_MS = 365 * 86_400_000


def _rows(node: NodeApi) -> int:
    return len(node.get("/v1/db/users", limit=1000)["rows"])


def _owner(node: NodeApi) -> str | None:
    tables = node.get("/v1/db")["tables"]
    return tables["users"]["owner"] if "users" in tables else None


def test_a_backdated_declaration_does_not_take_a_seeded_table_over_even_on_a_late_joiner(
        tmp_path: Path) -> None:
    nodes: list[NodeApi] = []
    try:
        nodes.append(start_inproc(tmp_path, "n0", env=DB_ENV))
        # n1 starts once n0 has seeded the table: with a window of 2 s, seeds racing on a
        # loaded machine could each settle first (the window is 10 minutes by default).
        wait_for(lambda: _owner(nodes[0]) is not None, 60, "n0 did not seed the table")
        nodes.append(start_inproc(tmp_path, "n1", env=DB_ENV, bootstrap=nodes))
        a, b = nodes
        wait_for(lambda: _owner(a) is not None and _owner(a) == _owner(b), 60,
                 "the seeded table has no common owner")
        owner = _owner(a)
        writer = a if a.peer_id == owner else b
        for k in range(20):
            writer.post("/v1/db/users", {"op": "upsert", "id": f"e{k}",
                                         "values": {"name": f"v{k}", "n": k}})
        wait_for(lambda: _rows(a) == 20 and _rows(b) == 20, 60, "rows did not replicate")
        time.sleep(2.5)  # past db.settle_ms since both nodes first saw the table

        key = Ed25519PrivateKey.generate()
        attacker = peer_id_of(key)
        takeover = SchemaDeclaration("users", {"name": "text"}, frozenset({attacker}), 0,
                                     attacker, backdated=True)
        now_ms = int(time.time() * 1000)
        # The same claim as a plain early event, no `since` needed.
        early = SchemaDeclaration("users", {"name": "text"}, frozenset({attacker}), 5, attacker)
        wires = [signed_event(key, now_ms, takeover.encoded, channel="db"),
                 signed_event(key, now_ms + 1, early.encoded, channel="db")]
        attack = {w.decode() for w in (takeover.encoded, early.encoded)}

        def judged(node: NodeApi) -> bool:
            """The attack is in the node's log and its application has judged it (refused as
            a takeover, or, without the rule, made the attacker the owner)."""
            stored = attack <= {c for _, _, c in channel_log(node, "db")}
            return stored and (_owner(node) != owner or 'outcome="takeover"' in node.get(
                "/metrics"))
        trio.run(partial(gossip, arrived=lambda: judged(a) and judged(b)), a.listen_addrs[0],
                 "db", wires)
        for node in nodes:
            assert _owner(node) == owner
            assert _rows(node) == 20
            series = node.get("/metrics")
            assert 'outcome="takeover"' in series
            assert 'peer_penalties_total{reason="takeover"}' in series
        # The honest owner still writes and declares.
        writer.post("/v1/db/users", {"op": "upsert", "id": "after", "values": {"n": 1}})
        writer.post("/v1/db-schemas/users", {"columns": {"name": "text", "n": "integer",
                                                         "extra": "real"}, "writers": None})
        wait_for(lambda: _rows(a) == 21 and _rows(b) == 21, 60, "owner's write lost")
        # It holds across a restart (the settled owner is persisted).
        a.terminate()
        a.start()
        assert _owner(a) == owner and _rows(a) == 21

        # A late joiner with the same config, its settle window at the default (10 minutes:
        # open throughout): it seeds the table itself, catches up on the log by Recon (the
        # refused declarations included), and the hostile host sends it the takeover again.
        # The claim order alone must give it the honest owner: a claim is dated by its
        # signed event, and `since` dates only a version.
        late = start_inproc(tmp_path, "late", env={**DB_ENV, "SYNCNODE_DB_SETTLE_MS": "600000"},
                            bootstrap=[a, b])
        nodes.append(late)
        wait_for(lambda: attack <= {c for _, _, c in channel_log(late, "db")}, 90,
                 "the late joiner did not catch up on the db log")
        # Connected until the node has judged the gossiped claim (the rows may all be there
        # by Recon before that).
        trio.run(partial(gossip, arrived=lambda: 'outcome="not_owner"' in late.get("/metrics"),
                         timeout=90), late.listen_addrs[0], "db", wires[:1])
        wait_for(lambda: _rows(late) == 21, 90, "the late joiner lost or lacks rows")
        assert _owner(late) == owner
        assert _owner(late) == owner
    finally:
        for node in nodes:
            node.kill()


def _load(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``syncnode bootstrap|snapshot pull ...`` (the CLI's own entry, in this process: a
    subprocess would add seconds of start-up per call); (exit status, stderr)."""
    from node.cli import snapshot as cli_snapshot

    capsys.readouterr()
    code = cli_snapshot.main(list(args))
    return code, capsys.readouterr().err


def test_snapshots_only_from_trusted_signers_and_never_from_the_future(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    signer = Ed25519PrivateKey.generate()
    signer_id = peer_id_of(signer)
    now_ms = int(time.time() * 1000)
    past = [now_ms - 60_000 + i for i in range(30)]
    honest = signed_snapshot(tmp_path, "honest", signer, past)
    future = signed_snapshot(tmp_path, "future", signer, [now_ms + YEAR_MS + i for i in range(30)])
    data = tmp_path / "victim"
    preset_identity(data)

    # The defaults trust the data dir's own key (and allowed peers: none here), not the signer.
    code, err = _load(capsys, "bootstrap", "--from-snapshot", str(honest), "--data-dir", str(data))
    assert code == 2 and f"signed by {signer_id}, which is not a trusted snapshot signer" in err
    code, err = _load(capsys, "bootstrap", "--from-snapshot", str(future), "--data-dir", str(data),
                      "--signer", signer_id)
    assert code == 2 and "lamport too far ahead" in err, err
    code, err = _load(capsys, "bootstrap", "--from-snapshot", str(honest), "--data-dir", str(data),
                      "--signer", signer_id)
    assert code == 0, err
    # `snapshot pull` holds to the same rules.
    code, err = _load(capsys, "snapshot", "pull", str(future), "--data-dir", str(data),
                      "--signer", signer_id)
    assert code == 2 and "lamport too far ahead" in err, err

    nodes: list[NodeApi] = []
    try:
        nodes.append(start_inproc(tmp_path, "victim"))
        nodes.append(start_inproc(tmp_path, "peer", bootstrap=nodes))
        victim, peer = nodes
        acked = victim.post("/v1/channels/general/events", {"content": "acknowledged"})
        contents = {e["content"] for e in peer.get("/v1/channels/general/events",
                                                   limit=1000)["events"]}

        def relayed() -> bool:
            nonlocal contents
            contents = {e["content"] for e in peer.get("/v1/channels/general/events",
                                                       limit=1000)["events"]}
            return len(contents) == 31
        wait_for(relayed, 90, "loaded and acknowledged events did not reach the peer")
        assert "acknowledged" in contents and acked["message_id"]
        assert metric(peer, "peer_penalties_total") == 0
        assert metric(peer, "peer_bans_total") == 0
        assert metric(peer, "events_rejected_total") == 0
    finally:
        for n in nodes:
            n.kill()
