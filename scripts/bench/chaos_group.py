"""The group a chaos run drives: real nodes on the emulated internet, on default settings.

Every node runs in its own namespace on the default port 4001 with no tuned timer (the test
suite's ``FAST_ENV``/``NET_ENV`` are not used): public hosts on the shared bridge, one node per
home behind its own nftables-masquerade router, everyone joined to the first public node, which
is what a new user's group looks like. :class:`Group` starts, stops and restarts them and keeps
what a checker needs: which node is meant to be up, every acknowledged publish, every event each
node stored with its ``received_at`` (read incrementally from the nodes' own logs), and the
resident memory of each process over its life.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.net.netns import Host, Internet
from tests.net.nodes import NetNode

__all__ = ["CHANNEL", "Ack", "Exit", "Group", "Member"]

CHANNEL = "general"
PAGE = 10_000


@dataclass(frozen=True)
class Ack:
    """A publish the node answered: it committed the event, so it must never be lost."""

    message_id: str
    member: str
    wall_ms: int  # when the answer arrived (epoch ms, the nodes' clock: one machine)


@dataclass(frozen=True)
class Exit:
    """A node process that ended while it was meant to run."""

    member: str
    code: int | None
    at_s: float
    log_tail: str


@dataclass
class Member:
    """One node of the group, across its restarts."""

    name: str
    node: NetNode
    up: bool = False  # meant to be running (the schedule decides)
    gone: bool = False  # left the group for good
    seen: dict[str, int] = field(default_factory=dict)  # message id -> received_at (ms)
    cursor: int = 0  # the last seq read from its log
    since_ms: int = 0  # when its current process answered (epoch ms)
    joined_ms: int = 0  # when its first process answered: it is in the group from then on
    rss: list[list[tuple[float, float]]] = field(default_factory=list)  # per process life

    @property
    def host(self) -> Host:
        return self.node.host


class Group:
    """Nodes of one chaos run, and what happened to them."""

    def __init__(self, internet: Internet, base: Path, publics: int, homes: int) -> None:
        self.internet = internet
        self.base = base
        self.started = time.monotonic()
        self.lock = threading.RLock()
        self.members: dict[str, Member] = {}
        self.acks: list[Ack] = []
        self.exits: list[Exit] = []
        self._publics = itertools.count()
        for _ in range(publics):
            self.add_public()
        for _ in range(homes):
            host = internet.add_home_host(internet.add_home())
            self._add(host)

    # -- membership -------------------------------------------------------------------------

    def _add(self, host: Host) -> Member:
        member = Member(host.name, NetNode(host, self.base / host.name, port=4001, env={}))
        self.members[member.name] = member
        return member

    def add_public(self) -> Member:
        next(self._publics)
        return self._add(self.internet.add_public())

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def live(self) -> list[Member]:
        with self.lock:
            return [m for m in self.members.values() if m.up]

    def homes(self) -> list[Member]:
        return [m for m in self.members.values() if not m.host.public and not m.gone]

    def start(self, member: Member) -> None:
        member.node.start(timeout=180)
        with self.lock:
            member.up = True
            member.since_ms = int(time.time() * 1000)
            member.joined_ms = member.joined_ms or member.since_ms
            member.rss.append([])

    def join(self, member: Member, to: Member) -> None:
        """``syncnode join`` the way a user does it, retried while ``to`` is still starting."""
        deadline = time.monotonic() + 60
        while True:
            try:
                member.node.join(to.node.address)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def stop(self, member: Member, how: str) -> None:
        """``how``: "term" (SIGTERM, waited for) or "kill" (SIGKILL)."""
        with self.lock:
            member.up = False
        if how == "term":
            with contextlib.suppress(Exception):
                member.node.terminate(timeout=60)
        member.node.kill()  # also closes the API bridge; a no-op on an exited process

    # -- publishing -------------------------------------------------------------------------

    def publish(self, member: Member, contents: list[str]) -> list[Ack]:
        """Publish (one event, or one batch); the acknowledged events, [] if it failed."""
        body: dict[str, Any] = ({"content": contents[0]} if len(contents) == 1
                                else {"events": [{"content": c} for c in contents]})
        try:
            answer = member.node.post(f"/v1/channels/{CHANNEL}/events", body)
        except Exception:
            return []
        now_ms = int(time.time() * 1000)
        events = answer.get("events", [answer])
        acks = [Ack(str(e["message_id"]), member.name, now_ms) for e in events]
        with self.lock:
            self.acks.extend(acks)
        return acks

    # -- observing --------------------------------------------------------------------------

    def read_new(self, member: Member) -> None:
        """Add the events ``member`` stored since the last read (its seq order)."""
        while True:
            page = member.node.get(f"/v1/channels/{CHANNEL}/events", order="seq",
                                   after=member.cursor, limit=PAGE)
            for event in page["events"]:
                member.seen[event["message_id"]] = int(event["received_at"])
                member.cursor = max(member.cursor, int(event["seq"]))
            if not page["more"]:
                return

    def observe(self) -> None:
        """One pass over the live nodes: new events, memory, and unexpected exits."""
        for member in self.live():
            proc = member.node.proc
            if proc is None:
                continue
            code = proc.poll()
            if code is not None:
                self._exited(member, code)
                continue
            with contextlib.suppress(Exception):
                self.read_new(member)
            with contextlib.suppress(OSError, ValueError):
                rss = _rss_mib(proc.pid)
                member.rss[-1].append((self.elapsed(), rss))

    def _exited(self, member: Member, code: int) -> None:
        with self.lock:
            if not member.up:
                return  # the schedule stopped it meanwhile
            member.up = False
        self.exits.append(Exit(member.name, code, round(self.elapsed(), 1),
                               member.node.log_tail(60)))
        # The run goes on with the node back, as a supervisor would bring it back.
        with contextlib.suppress(Exception):
            member.node.kill()
            self.start(member)

    def holds(self, members: Iterable[Member], ids: set[str]) -> bool:
        return all(ids <= m.seen.keys() for m in members)

    def connections(self, member: Member) -> dict[str, str]:
        """Connected peer id -> "direct" or "relayed"."""
        return {p["peer_id"]: p.get("path", "direct")
                for p in member.node.get("/v1/peers")["connected"]}

    def unexpected_log_lines(self) -> list[str]:
        found = []
        for member in self.members.values():
            with contextlib.suppress(FileNotFoundError):
                for line in member.node.stderr_path.read_text(errors="replace").splitlines():
                    if "unexpected" in line.lower():
                        found.append(f"{member.name}: {line[:300]}")
        return found

    def kill_all(self) -> None:
        for member in self.members.values():
            with self.lock:
                member.up = False
            member.node.kill()


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise ValueError("no VmRSS")
