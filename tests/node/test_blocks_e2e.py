"""Block streams end to end: two producer nodes and two consumer nodes (in this process; the
CLI under test runs as a process)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from sync.cardinal import ZERO_HASH, BlockPayload, make_payload, make_sub_batch, payload_to_json
from tests.conftest import ROOT
from tests.harness.cluster import metric, preset_identity, start_inproc, wait_for
from tests.harness.procs import NodeApi

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

BLOCKS_ENV = {
    "SYNCNODE_BLOCKS_ENABLED": "true",
    "SYNCNODE_BLOCKS_ROUTES": "acct/=blocks-acct,state/=blocks-state",
    "SYNCNODE_BLOCKS_REORG_THRESHOLD": "16",
}


def make_chain(length: int) -> tuple[list[BlockPayload], BlockPayload]:
    """A chain 0..length-1 plus a lighter side block forking off block 4."""
    chain: list[BlockPayload] = []
    parent = ZERO_HASH
    for n in range(length):
        sub = make_sub_batch("state/", bytes([n + 1]) * 32, {f"state/{n}": b"\x01"})
        payload = make_payload(
            bytes([0xB0, n]) * 16, n, parent,
            updates={**{f"acct/{n}/{i}": bytes([i, n]) for i in range(5)}, f"meta/{n}": b"m"},
            deletes=[f"acct/{n}/old"], sub_batches=[sub],
        )
        chain.append(payload)
        parent = payload.hash
    side = make_payload(b"\x5e" * 32, 5, chain[4].hash, updates={"acct/side": b"\x00"})
    return chain, side


def head_of(node: NodeApi) -> dict[str, object] | None:
    try:
        head = node.get("/v1/blocks/head")
    except httpx.HTTPStatusError:
        return None
    return dict(head)


def test_two_producers_two_consumers_end_with_the_same_head(tmp_path: Path) -> None:
    chain, side = make_chain(30)
    lines = [json.dumps(payload_to_json(p)) for p in [*chain, side]]
    first = tmp_path / "blocks.jsonl"
    first.write_text("\n".join(lines) + "\n")
    # The second producer has the same blocks in another order (and a blank line).
    second = tmp_path / "blocks-reversed.jsonl"
    second.write_text("\n".join(reversed(lines)) + "\n\n")

    producers = ",".join(preset_identity(tmp_path / name) for name in ("p1", "p2"))
    env = {**BLOCKS_ENV, "SYNCNODE_BLOCKS_PRODUCERS": producers}
    nodes: list[NodeApi] = []
    try:
        p1 = start_inproc(tmp_path, "p1", env=env)
        nodes.append(p1)
        p2 = start_inproc(tmp_path, "p2", env=env, bootstrap=[p1])
        nodes.append(p2)
        c1 = start_inproc(tmp_path, "c1", env=env, bootstrap=[p1, p2])
        nodes.append(c1)
        c2 = start_inproc(tmp_path, "c2", env={**env, "SYNCNODE_BLOCKS_TRACKED": "acct/"},
                              bootstrap=[p1, p2, c1])
        nodes.append(c2)
        wait_for(lambda: all(len(n.get("/v1/peers")["connected"]) >= 3 for n in nodes), 60,
                 "cluster did not connect")

        bad = tmp_path / "bad.jsonl"
        bad.write_text(lines[0] + "\n" + '{"hash": "0x00"}\n')
        result = p1.cli("blocks", "publish", str(bad))
        assert result.returncode == 2 and "line 2:" in result.stderr

        for node, path in ((p1, first), (p2, second)):
            result = node.cli("blocks", "publish", str(path))
            assert result.returncode == 0, result.stderr
            assert result.stdout.startswith(f"published {len(lines)} blocks as ")

        tip = chain[-1]
        wait_for(lambda: all((head_of(n) or {}).get("hash") == "0x" + tip.hash.hex()
                             for n in nodes), 120, "nodes did not reach the same head")
        # Redundant producers emit identical messages: copies are duplicates, not conflicts.
        for node in nodes:
            assert metric(node, "blocks_failed_total") == 0
            assert metric(node, "blocks_rejected_total") == 0
        heads = []
        for node in (c1, c2):
            result = node.cli("blocks", "head", "--json")
            assert result.returncode == 0, result.stderr
            heads.append(json.loads(result.stdout))
        assert heads[0] == {**heads[1], "updated_at": heads[0]["updated_at"]}
        assert heads[0]["number"] == 29

        # c1 tracks everything, c2 only the acct/ prefix.
        block7 = chain[7]
        got = [json.loads(n.cli("blocks", "get", "7", "--json").stdout) for n in (c1, c2)]
        assert got[0]["payload"] == payload_to_json(block7)
        assert got[1]["hash"] == "0x" + block7.hash.hex() and got[1]["canonical"] is True
        assert set(got[1]["payload"]["updates"]) == {f"acct/7/{i}" for i in range(5)}
        assert got[1]["payload"].get("sub_batches") is None
        by_hash = c1.cli("blocks", "get", "0x" + block7.hash.hex())
        assert by_hash.returncode == 0 and "number     7" in by_hash.stdout

        # `blocks follow --from-start` replays to the same chain on every consumer.
        for node in (c1, c2):
            assert follow_chain(node, chain[-1].hash.hex()) == [p.hash.hex() for p in chain]

        # A deep reorg (24 blocks back, beyond the threshold of 16) from one producer only.
        fork = chain[:6]
        for n in range(6, 9):
            fork.append(make_payload(bytes([0xF0, n]) * 16, n, fork[-1].hash,
                                     updates={f"acct/fork/{n}": b"\x02"}))
        reorg = tmp_path / "reorg.jsonl"
        reorg.write_text("".join(json.dumps(payload_to_json(p)) + "\n" for p in fork[6:]))
        result = p2.cli("blocks", "publish", str(reorg), "--reorg-ancestor",
                        "0x" + chain[5].hash.hex(), "--ancestor-number", "5")
        assert result.returncode == 0, result.stderr
        wait_for(lambda: all((head_of(n) or {}).get("hash") == "0x" + fork[-1].hash.hex()
                             for n in nodes), 60, "nodes did not follow the deep reorg")
        for node in (c1, c2):
            assert follow_chain(node, fork[-1].hash.hex()) == [p.hash.hex() for p in fork]
            old = json.loads(node.cli("blocks", "get", "0x" + chain[20].hash.hex(),
                                      "--json").stdout)
            assert old["canonical"] is False
    finally:
        for node in nodes:
            node.kill()


def follow_chain(node: NodeApi, tip: str) -> list[str]:
    """The chain `blocks follow --from-start` replays, up to the moment it reaches ``tip``."""
    proc = subprocess.Popen(node.cli_command("blocks", "follow", "--from-start", "--json"),
                            cwd=ROOT, stdout=subprocess.PIPE, text=True, env=node.cli_env())
    chain: list[str] = []
    deadline = time.monotonic() + 60
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            change = json.loads(line)
            if change["kind"] == "applied":
                chain.append(change["hash"][2:])
            else:
                assert chain.pop() == change["hash"][2:]
            if (chain and chain[-1] == tip) or time.monotonic() > deadline:
                break
    finally:
        proc.kill()
        proc.wait(timeout=10)
    return chain


def test_a_block_without_its_parent_is_held_pending(tmp_path: Path) -> None:
    """blocks_pending counts what the consumer holds: here a block whose parent has not
    arrived (and, once applied, the recent blocks its tree keeps for reorgs)."""
    producer = preset_identity(tmp_path / "p")
    node = start_inproc(tmp_path, "p",
                            env={**BLOCKS_ENV, "SYNCNODE_BLOCKS_PRODUCERS": producer})
    try:
        assert metric(node, "blocks_pending") == 0
        chain = make_chain(5)[0][:3]
        node.post("/v1/blocks", {"blocks": [payload_to_json(chain[2])]})  # 0 and 1 withheld
        wait_for(lambda: metric(node, "blocks_pending") >= 1, 30, "the orphan is not pending")
        assert head_of(node) is None
        node.post("/v1/blocks", {"blocks": [payload_to_json(p) for p in chain[:2]]})
        wait_for(lambda: (head_of(node) or {}).get("number") == 2, 30, "chain not applied")
    finally:
        node.kill()
