"""How fast a node took in events it lacked, timed by the node's own records.

A node stores what one fetch (or one gossip message) brings in one commit, all with one
``received_at``: counting the 50 ms bins in which events arrived counts deliveries, not the time
they took (616 events in one delivery gave 12,320/s however long that fetch ran). The time a
catch-up took is instead from when the node began taking the events in to when it stored the
last one:

- the start is the start of the Recon session that brought the first of them: each session
  that fetched logs its wall-clock span (``recon fetched events ... started_ms= ended_ms=``,
  node/replication/recon_session.py). A fetched event is handed to the store before its session
  ends and committed soon after, so the sessions that may have brought the first are those that
  started before it was stored and ended at most ``COMMIT_SLACK_MS`` before; of those the
  earliest start counts (a concurrent session that brought something else makes the time
  longer, never shorter). When none did, the first came by gossip: the start is its arrival;
- the end is the last one's ``received_at`` (stamped as its commit began).

``restart_catchup_bench.py`` and ``chaos_bench.py`` both time their catch-ups with
:func:`timed_catchup`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["COMMIT_SLACK_MS", "Session", "Timed", "fetch_sessions", "timed_catchup"]

# How long after its session ended a fetched event may still be committed (the store's queue
# holds at most 20,000 fetched events: well under a second of commits on this machine).
COMMIT_SLACK_MS = 2_000
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


@dataclass(frozen=True)
class Session:
    """One Recon session that fetched events (either side may fetch)."""

    peer: str
    events: int
    started_ms: int
    ended_ms: int


@dataclass(frozen=True)
class Timed:
    """A catch-up: ``events`` taken in from ``start_ms`` to ``last_ms`` (epoch ms)."""

    events: int
    start_ms: int
    last_ms: int
    by_session: bool  # the start is a session's (else the first came by gossip)

    @property
    def seconds(self) -> float:
        return (self.last_ms - self.start_ms) / 1000

    @property
    def rate(self) -> int | None:
        """Events per second; None when no time passed (one delivery, by gossip)."""
        return round(self.events / self.seconds) if self.seconds > 0 else None


def fetch_sessions(log_path: Path) -> list[Session]:
    """The sessions that fetched, from a node's log (text format; every process life)."""
    out = []
    try:
        text = log_path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        if 'msg="recon fetched events"' not in line:
            continue
        fields = {k: v.strip('"') for k, v in _FIELD.findall(line)}
        if "started_ms" in fields:
            out.append(Session(fields.get("peer", ""), int(fields["events"]),
                               int(fields["started_ms"]), int(fields["ended_ms"])))
    return out


def timed_catchup(arrivals_ms: Sequence[int], sessions: Sequence[Session]) -> Timed | None:
    """The catch-up of the events stored at ``arrivals_ms`` (their ``received_at``) by a node
    whose fetching sessions are ``sessions``; None without events."""
    if not arrivals_ms:
        return None
    first, last = min(arrivals_ms), max(arrivals_ms)
    bringing = [s.started_ms for s in sessions
                if s.started_ms <= first <= s.ended_ms + COMMIT_SLACK_MS]
    return Timed(len(arrivals_ms), min([first, *bringing]), last, bool(bringing))
