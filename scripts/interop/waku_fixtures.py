"""Generate the @waku/sds interop fixtures with the real package (docs/interop.md).

    .venv/bin/python scripts/interop/waku_fixtures.py [--out tests/sync/sds/fixtures/waku]

Installs @waku/sds@0.0.8 from npm into a temporary directory (needs Node >= 20 and npm), drives
real ``MessageChannel`` instances through ``waku_driver.mjs`` next to our ``SdsChannel`` in the
"waku" profile, and checks on the package's side that it decodes, delivers, acknowledges and
repairs our messages; any failure (including a message of ours the package cannot decode) exits
with status 1 and writes nothing. Writes ``scenario.json`` (every wire both ways, with the steps
our channel took) and ``bloom.json`` (hashing vectors), which ``tests/sync/sds/test_waku.py``
replays without Node.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import random
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from sync.identity import peer_id_of  # noqa: E402
from sync.sds import SdsChannel, SdsConfig  # noqa: E402
from sync.sds.events import (  # noqa: E402
    Acknowledged,
    Delivered,
    MissingDependencies,
    RepairRequested,
    SdsEvent,
)
from sync.sds.waku import waku_message_id  # noqa: E402

PACKAGE = "@waku/sds@0.0.8"
CHANNEL = "interop"
US = "syncnode-us"
# Our clock starts at the generation time: the package's Lamport clocks start at Date.now(),
# and a receiver refuses timestamps far ahead of its own clock (sds.max_lamport_ahead_ms).
T0 = float(int(time.time()))
SEED = 18
DEFAULT_OUT = ROOT / "tests" / "sync" / "sds" / "fixtures" / "waku"


def our_config() -> SdsConfig:
    """Our side of the scenario: one history entry per message (so that acknowledgements by
    bloom filter alone can be told apart), quick repairs, no timers firing on their own."""
    return SdsConfig(profile="waku", causal_history_size=1, t_min=1.0, t_max=2.0,
                     resend_interval=10_000.0, possibly_acked_resend_interval=10_000.0,
                     sync_interval=10_000.0, sync_jitter=0.0)


def pack(wire: bytes) -> str:
    """Fixture encoding of a wire: base64 of zlib (their filters are 18 KiB, mostly zeros)."""
    return base64.b64encode(zlib.compress(wire, 9)).decode()


class Failure(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise Failure(message)


class Driver:
    def __init__(self, dist: Path) -> None:
        self.proc = subprocess.Popen(
            ["node", str(Path(__file__).with_name("waku_driver.mjs")), str(dist)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def __call__(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise Failure(f"waku driver exited during {op}")
        answer: dict[str, Any] = json.loads(line)
        if not answer.pop("ok"):
            raise Failure(f"waku driver {op}: {answer['error']}")
        return answer

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


class Ours:
    """Our ``SdsChannel``, every step recorded for the replay in the tests."""

    def __init__(self, name: str, now: float) -> None:
        self.name = name
        self.channel = SdsChannel(CHANNEL, US, None, our_config(), random.Random(SEED), now)
        self.steps: list[dict[str, Any]] = [{"op": "start", "now": now}]
        self.log: list[SdsEvent] = []

    def send(self, payload: bytes, now: float, name: str) -> bytes:
        wire = self.channel.send(payload, now)
        self.steps.append({"op": "send", "payload": payload.hex(), "now": now, "name": name,
                           "wire": pack(wire)})
        self.log += self.channel.events()
        return wire

    def receive(self, name: str, wire: bytes, now: float) -> list[SdsEvent]:
        self.channel.receive(wire, now)
        self.steps.append({"op": "receive", "message": name, "now": now})
        events = self.channel.events()
        self.log += events
        return events

    def timer(self, now: float, name: str) -> list[bytes]:
        wires = self.channel.handle_timer(now)
        self.steps.append({"op": "timer", "now": now, "name": name,
                           "wires": [pack(w) for w in wires]})
        self.log += self.channel.events()
        return wires


def install(tmp: Path) -> Path:
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error",
                    "--prefix", str(tmp), PACKAGE], check=True)
    dist = tmp / "node_modules" / "@waku" / "sds" / "dist"
    version = json.loads((dist.parent / "package.json").read_text())["version"]
    check(version == PACKAGE.rsplit("@", 1)[1], f"npm installed @waku/sds {version}")
    return dist


def kinds(events: list[dict[str, Any]], kind: str) -> list[Any]:
    return [e.get("id", e.get("ids")) for e in events if e["kind"] == kind]


def bloom_vectors(waku: Driver) -> dict[str, Any]:
    ids = ["hello", "dummy", waku_message_id(b"a0"), waku_message_id(b"o0"), "sync-abc"]
    made = waku("bloom", ids=ids)
    check(made["total_bits"] == 150_000 and made["hashes"] == 10 and made["words"] == 2344,
          f"unexpected filter shape {made['total_bits']}/{made['hashes']}/{made['words']}")
    return {"package": PACKAGE, "capacity": 10_000, "error_rate": 0.001,
            "total_bits": made["total_bits"], "hashes": made["hashes"], "words": made["words"],
            "indices": made["indices"], "filter": pack(bytes.fromhex(made["bytes"]))}


def scenario(waku: Driver) -> dict[str, Any]:
    theirs: dict[str, str] = {}
    observed: dict[str, Any] = {}

    def keep(name: str, wire_hex: str | None) -> bytes:
        check(wire_hex is not None, f"the package produced no {name}")
        assert wire_hex is not None
        theirs[name] = pack(bytes.fromhex(wire_hex))
        return bytes.fromhex(wire_hex)

    def feed(channel: str, name: str, wire: bytes) -> list[dict[str, Any]]:
        got = waku("receive", name=channel, wire=wire.hex())
        check(got["decoded"] is not None, f"@waku/sds could not decode our {name}")
        observed[f"{channel}<-{name}"] = got
        errors = [e["error"] for e in got["events"] if e["kind"] == "error"]
        check(not errors, f"@waku/sds failed on our {name}: {errors}")
        return list(got["events"])

    # A: alice (the package) sends a0..a3 and a sync message; our channel repairs a0.
    waku("new", name="alice", channel=CHANNEL, sender="alice")
    a = [keep(f"a{i}", waku("send", name="alice", payload=f"a{i}".encode().hex())["wire"])
         for i in range(4)]
    keep("alice_sync", waku("sync", name="alice")["wire"])
    repairer = Ours("repair", T0)
    repairer.receive("a1", a[1], T0 + 1)
    request = repairer.timer(T0 + 3, "repair_request")
    check(len(request) == 1 and any(isinstance(e, RepairRequested) for e in repairer.log),
          "our channel did not ask for a0")
    events = feed("alice", "repair_request", request[0])
    check(kinds(events, "repair_request_received") == [[waku_message_id(b"a0")]],
          f"alice did not take our repair request: {events}")
    answers = waku("repairs", name="alice")["wires"]
    check(len(answers) == 1, f"alice answered {len(answers)} repairs")
    keep("a0_repair", answers[0])
    delivered = [e.message_id for e in repairer.receive("a0_repair", bytes.fromhex(answers[0]),
                                                        T0 + 4) if isinstance(e, Delivered)]
    check(delivered == [waku_message_id(b"a0"), waku_message_id(b"a1")],
          f"alice's repair did not complete our log: {delivered}")

    # B: our messages to bob (the package), acknowledgements both ways, a repair for bob.
    waku("new", name="bob", channel=CHANNEL, sender="bob",
         options={"causalHistorySize": 1, "repairConfig": {"tMin": 0, "tMax": 1}})
    us = Ours("main", T0)
    now = T0 + 10
    for i in range(3):
        name = f"o{i}"
        events = feed("bob", name, us.send(name.encode(), now, name))
        check(kinds(events, "delivered") == [waku_message_id(name.encode())],
              f"bob did not deliver our {name}: {events}")
        now += 1
    b0 = keep("b0", waku("send", name="bob", payload=b"b0".hex())["wire"])
    b1 = keep("b1", waku("send", name="bob", payload=b"b1".hex())["wire"])
    acks = [e for e in us.receive("b0", b0, now) if isinstance(e, Acknowledged)]
    check({(e.message_id, e.by_bloom) for e in acks} == {
        (waku_message_id(b"o2"), False), (waku_message_id(b"o0"), True),
        (waku_message_id(b"o1"), True)}, f"bob's b0 did not acknowledge o0..o2: {acks}")
    us.receive("b1", b1, now + 1)
    now += 2
    events = feed("bob", "o3", us.send(b"o3", now, "o3"))
    check(kinds(events, "acknowledged") == [waku_message_id(b"b1")]
          and kinds(events, "possibly_acknowledged") == [waku_message_id(b"b0")],
          f"our o3 did not acknowledge b1 (history) and b0 (filter, once): {events}")
    events = feed("bob", "o4", us.send(b"o4", now + 1, "o4"))
    check(kinds(events, "acknowledged") == [waku_message_id(b"b0")],
          f"our second filter did not acknowledge b0: {events}")
    now += 2
    keep("bob_sync", waku("sync", name="bob")["wire"])
    us.receive("bob_sync", bytes.fromhex(theirs_hex(theirs["bob_sync"])), now)
    # o5 never reaches bob: it learns of it from o6 and asks for it in its next sync message.
    us.send(b"o5", now + 1, "o5")
    events = feed("bob", "o6", us.send(b"o6", now + 2, "o6"))
    check(kinds(events, "missing") == [[waku_message_id(b"o5")]], f"bob missed no o5: {events}")
    ask = keep("bob_repair_sync", waku("sync", name="bob")["wire"])
    decoded = waku("decode", wire=ask.hex())["decoded"]
    check([e["message_id"] for e in decoded["repair_request"]] == [waku_message_id(b"o5")],
          f"bob's sync carries no repair request for o5: {decoded['repair_request']}")
    now += 3
    us.receive("bob_repair_sync", ask, now)
    answer = us.timer(now, "repair_answer")
    check(len(answer) == 1, f"our channel answered {len(answer)} repairs")
    events = feed("bob", "repair_answer", answer[0])
    events += waku("sweep", name="bob")["events"]
    check(kinds(events, "delivered") == [waku_message_id(b"o5"), waku_message_id(b"o6")],
          f"our repair did not complete bob's log: {events}")
    keep("bob_ephemeral", waku("ephemeral", name="bob", payload=b"e0".hex())["wire"])
    ours_ephemeral = us.channel.send(b"e1", now, ephemeral=True)
    got = waku("decode", wire=ours_ephemeral.hex())["decoded"]
    check(got is not None and got["kind"] == "ephemeral", f"our ephemeral decoded as {got}")
    missing = [e for e in us.log if isinstance(e, MissingDependencies)]
    check(not missing, f"our channel missed dependencies in scenario B: {missing}")
    # Why the profile exists: a message of the syncnode profile (signed, our filter) makes the
    # package's acknowledgement review throw (its filter reader wants 18,752 bytes).
    key = Ed25519PrivateKey.generate()
    signed = SdsChannel(CHANNEL, peer_id_of(key), key, SdsConfig(), random.Random(SEED), now)
    waku("new", name="carol", channel=CHANNEL, sender="carol")
    got = waku("receive", name="carol", wire=signed.send(b"s0", now).hex())
    errors = [e["error"] for e in got["events"] if e["kind"] == "error"]
    check(bool(errors) and got["decoded"] is not None,
          f"the package took a syncnode-profile message without error: {got['events']}")
    observed["syncnode_profile_message"] = {"decoded": True, "errors": errors}
    return {
        "package": PACKAGE, "channel": CHANNEL, "us": US, "seed": SEED, "t0": T0,
        "our_config": dataclasses.asdict(our_config()),
        "theirs": theirs, "repair_steps": repairer.steps, "main_steps": us.steps,
        "our_ephemeral": pack(ours_ephemeral), "observed_by_waku": observed,
    }


def theirs_hex(packed: str) -> str:
    return zlib.decompress(base64.b64decode(packed)).hex()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="waku-sds-") as tmp:
        dist = install(Path(tmp))
        waku = Driver(dist)
        try:
            vectors = bloom_vectors(waku)
            story = scenario(waku)
        except Failure as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            return 1
        finally:
            waku.close()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in (("bloom.json", vectors), ("scenario.json", story)):
        (args.out / name).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}/bloom.json and scenario.json: every check on the package's side "
          "passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
