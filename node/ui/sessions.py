"""Sign-in to the status page without the API token in the page or the browser's history.

``syncnode ui`` asks the node (with the token) for a one-time link: a random nonce, good once
and for ``ui.link_ttl_s``. Opening it trades the nonce for a session: a random id in an HttpOnly,
SameSite=Strict cookie, then a redirect to ``/`` (so the address bar and history keep only
``/``). A session authorises the page's read-only GETs (``READ_PATHS``), at most
``ui.requests_per_s`` (a token bucket of ``ui.burst``), until ``ui.session_ttl_s``; at most
``ui.max_sessions`` live (the oldest goes first) and ``ui.max_links`` links wait.

Only hashes of nonces and session ids are kept, compared in constant time by dict lookup of the
hash: a timing probe learns nothing of a live secret.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections import OrderedDict
from dataclasses import dataclass

from node.clock import Clock
from node.config.settings import UiSection
from node.telemetry.metrics import Metrics

__all__ = ["READ_PATHS", "UiSessions", "cookie_name"]
# What a session may GET: the page's data, nothing that writes, no stream, no secret.
READ_PATHS = re.compile(
    r"^/v1/(status|channels|peers|db|snapshots/status|ui/session)$"
    r"|^/v1/db/[A-Za-z_][A-Za-z0-9_]{0,62}$"
)


def cookie_name(port: int | None) -> str:
    """The session cookie's name: cookies are shared by every port of a host, so two nodes on
    one machine each need their own."""
    return f"syncnode_ui_{port or 80}"


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "replace")).digest()


@dataclass
class _Session:
    expires: float
    tokens: float
    refilled: float


class UiSessions:
    """The pending links and live sessions of one node (in memory: a restart signs out)."""

    def __init__(self, section: UiSection, metrics: Metrics, clock: Clock) -> None:
        self.section = section
        self.metrics = metrics
        self.clock = clock
        self._links: OrderedDict[bytes, float] = OrderedDict()
        self._sessions: OrderedDict[bytes, _Session] = OrderedDict()
        metrics.describe("ui_links_total", "counter",
                         "Status page sign-in links by outcome (issued, used, refused: unknown, "
                         "used before or expired)")
        metrics.describe("ui_requests_refused_total", "counter",
                         "Status page requests refused, by reason (session: none or expired; "
                         "rate: over ui.requests_per_s; write: a session cannot write; "
                         "csrf: not from the page itself)")
        metrics.gauge_fn("ui_sessions", lambda: float(len(self._sessions)),
                         "Status page sessions signed in")
        for outcome in ("issued", "used", "refused"):
            metrics.inc("ui_links_total", 0, outcome=outcome)
        for reason in ("session", "rate", "write", "csrf"):
            metrics.inc("ui_requests_refused_total", 0, reason=reason)

    def issue_link(self) -> str:
        """A new one-time nonce (the oldest pending one is dropped past ``ui.max_links``)."""
        now = self.clock.now()
        self._expire(now)
        nonce = secrets.token_urlsafe(32)
        self._links[_digest(nonce)] = now + self.section.link_ttl_s
        while len(self._links) > self.section.max_links:
            self._links.popitem(last=False)
        self.metrics.inc("ui_links_total", outcome="issued")
        return nonce

    def redeem(self, nonce: str) -> str | None:
        """A new session id for a valid unused ``nonce`` (which is then spent), else None."""
        now = self.clock.now()
        self._expire(now)
        if self._links.pop(_digest(nonce), None) is None:
            self.metrics.inc("ui_links_total", outcome="refused")
            return None
        self.metrics.inc("ui_links_total", outcome="used")
        session = secrets.token_urlsafe(32)
        self._sessions[_digest(session)] = _Session(now + self.section.session_ttl_s,
                                                    float(self.section.burst), now)
        while len(self._sessions) > self.section.max_sessions:
            self._sessions.popitem(last=False)
        return session

    def admit(self, session: str) -> str | None:
        """None if ``session`` may make a request now (one token spent), else the refusal
        reason (``session`` or ``rate``), counted."""
        now = self.clock.now()
        self._expire(now)
        state = self._sessions.get(_digest(session))
        if state is None:
            return self.refuse("session")
        rate, burst = self.section.requests_per_s, float(self.section.burst)
        state.tokens = min(burst, state.tokens + (now - state.refilled) * rate)
        state.refilled = now
        if state.tokens < 1.0:
            return self.refuse("rate")
        state.tokens -= 1.0
        return None

    def expires_in(self, session: str) -> float | None:
        state = self._sessions.get(_digest(session))
        return None if state is None else max(0.0, state.expires - self.clock.now())

    def refuse(self, reason: str) -> str:
        self.metrics.inc("ui_requests_refused_total", reason=reason)
        return reason

    def _expire(self, now: float) -> None:
        for key in [k for k, until in self._links.items() if until <= now]:
            del self._links[key]
        for key in [k for k, s in self._sessions.items() if s.expires <= now]:
            del self._sessions[key]
