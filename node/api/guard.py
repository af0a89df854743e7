"""The API's front door: who may call it, from where, with what, and what happens when it fails.

An ASGI wrapper around the routes, checked in this order before any handler runs:

1. ``Host`` must name this node (DNS rebinding: a page served from ``attacker.example`` that
   resolves to 127.0.0.1 still sends ``Host: attacker.example``).
2. A browser's ``Origin`` (or ``Sec-Fetch-Site: cross-site``) must be this node's own origin:
   pages elsewhere get 403, and no CORS header is ever sent, so a browser shows them nothing.
3. ``Authorization: Bearer <token>`` with the data dir's token (the routes in ``OPEN_PATHS`` are
   exempt while the API is bound to loopback only; the status page's files and its sign-in
   link, ``UI_PATHS``, always: they hold nothing secret). Without a token, the status page's
   session cookie (``node.ui.sessions``) authorises GETs of the page's read-only data only,
   sent by the page itself (the ``X-Syncnode-UI`` header, which a cross-origin page cannot
   send without a preflight this API never grants), within ``ui.requests_per_s``.
4. A request body must be ``application/json``: a cross-site ``text/plain`` form post cannot be.

A response sent before the request's body was read in full (any refusal above, a 404 to a POST)
says ``Connection: close``: the server ends that connection, and a client must not send its next
request on it. Every response carries an ``X-Request-Id``; every 5xx, and every exception a
handler did not turn into one, is logged with that id and counted in ``api_responses_total``.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from node.clock import Clock
from node.config.fields import is_loopback_host
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from node.ui.sessions import READ_PATHS, UiSessions, cookie_name

__all__ = ["OPEN_PATHS", "UI_HEADER", "UI_PATHS", "ApiGuard", "HostPolicy", "is_loopback_host"]

log = logging.getLogger("syncnode.api")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]

# Liveness and readiness probes answer without the token on a loopback-only API: they reveal
# nothing but "up", and a supervisor should not need the secret to ask.
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
UI_PATHS = frozenset({"/", "/ui/login", "/ui/app.js", "/ui/style.css", "/ui/icon.svg"})
UI_HEADER = b"x-syncnode-ui"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def _split_host(value: str) -> tuple[str, int | None] | None:
    """``host[:port]`` as sent in a Host header (IPv6 in brackets); None if malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1:]
    else:
        name, _, port_text = value.partition(":")
        rest = f":{port_text}" if _ else ""
    if not name:
        return None
    if not rest:
        return name, None
    if not rest.startswith(":") or not rest[1:].isdigit() or len(rest) > 6:
        return None
    return name, int(rest[1:])


class HostPolicy:
    """Which ``Host`` headers name this node, given the address the API is bound to."""

    def __init__(self, bind_host: str, extra_hosts: Iterable[str] = ()) -> None:
        bind_host = bind_host.strip("[]").lower()
        self.remote = not is_loopback_host(bind_host)
        self.names = {bind_host, *(h.strip("[]").lower() for h in extra_hosts)}
        if is_loopback_host(bind_host):
            self.names.update(LOOPBACK_NAMES)
        try:
            self.wildcard = ipaddress.ip_address(bind_host).is_unspecified
        except ValueError:
            self.wildcard = False

    def allows(self, header: str, port: int | None) -> bool:
        parsed = _split_host(header)
        if parsed is None:
            return False
        name, sent_port = parsed
        if port is not None and (sent_port or 80) != port:
            return False
        if name in self.names:
            return True
        # On a wildcard bind any literal address of the machine is fine: rebinding needs a name.
        if self.wildcard:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                return False
            return True
        return False


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


class ApiGuard:
    """ASGI middleware enforcing the checks above around ``app``."""

    def __init__(self, app: Asgi, *, token: str, hosts: HostPolicy, metrics: Metrics,
                 clock: Clock, open_paths: frozenset[str] = OPEN_PATHS,
                 ui: UiSessions | None = None) -> None:
        self.clock = clock
        self.app = app
        self.ui = ui
        self.token = token.encode("ascii")
        self.hosts = hosts
        self.metrics = metrics
        self.open_paths = open_paths
        metrics.describe("api_responses_total", "counter",
                         "HTTP responses of the local API by status code (5xx are also logged "
                         "with their request id)")
        metrics.describe("api_refused_total", "counter",
                         "Requests refused before any handler ran, by reason (host, origin, "
                         "token, content_type, session)")
        metrics.describe_histogram("api_request_seconds",
                                   "Time from a request's arrival to its last response byte")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            # No route speaks WebSocket, and a browser opens one cross-origin without asking.
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = secrets.token_hex(8)
        scope.setdefault("state", {})["request_id"] = request_id
        started = self.clock.now()
        status = 0

        # A response sent before the request's body was read in full (a refusal, a 404 to a
        # POST) ends the connection: the server cannot read the next request past a body it
        # never read. Said in the response (Connection: close), or a client that reuses the
        # connection meets a close instead of its next answer.
        body_read = not _has_body(scope)

        async def tracked_receive() -> Message:
            nonlocal body_read
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_read = True
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message["headers"] = [*message.get("headers", ()),
                                      (b"x-request-id", request_id.encode())]
                if not body_read:
                    message["headers"].append((b"connection", b"close"))
            await send(message)

        try:
            refusal = self._refusal(scope)
            if refusal is not None:
                code, reason, text, extra = refusal
                self.metrics.inc("api_refused_total", reason=reason)
                await _send_error(tracked_send, code, text, extra)
            else:
                await self.app(scope, tracked_receive, tracked_send)
        except Exception:
            log.exception("API request failed",
                          extra=kv(request_id=request_id, method=scope.get("method"),
                                   path=scope.get("path")))
            if status == 0:
                await _send_error(tracked_send, 500,
                                  f"internal error (request id {request_id}; see the node log)")
            else:  # the response had started (a stream): all that is left is to cut it
                status = 500
        finally:
            self.metrics.inc("api_responses_total", status=str(status or 500))
            self.metrics.observe("api_request_seconds", self.clock.now() - started)
            if status >= 500:
                log.warning("API answered %d", status,
                            extra=kv(request_id=request_id, method=scope.get("method"),
                                     path=scope.get("path")))

    def _refusal(self, scope: Scope) -> tuple[int, str, str, dict[str, str]] | None:
        server = scope.get("server")
        port = server[1] if server else None
        host = _header(scope, b"host")
        if host is None or not self.hosts.allows(host, port):
            return 403, "host", f"Host header {host!r} does not name this node", {}
        origin = _header(scope, b"origin")
        if origin is not None and origin != f"{scope.get('scheme', 'http')}://{host}":
            return 403, "origin", f"cross-origin request from {origin!r} refused", {}
        if (_header(scope, b"sec-fetch-site") or "").lower() == "cross-site":
            return 403, "origin", "cross-site request refused", {}
        path = scope["path"]
        sent_token = _header(scope, b"authorization")
        open_path = (path in self.open_paths and not self.hosts.remote) or (
            self.ui is not None and path in UI_PATHS)
        if not open_path and self.ui is not None and sent_token is None:
            session = _cookie(scope, cookie_name(port))
            if session is not None:
                return self._session_refusal(scope, session)
        if not open_path:
            sent = sent_token or ""
            scheme, _, credential = sent.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                credential.strip().encode("latin-1"), self.token
            ):
                return (401, "token", "missing or wrong API token (send Authorization: Bearer "
                        "<token>; the token is in the node's data dir, file api_token)",
                        {"www-authenticate": 'Bearer realm="syncnode"'})
        if scope["method"] in BODY_METHODS and _has_body(scope):
            media = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
            if media != "application/json":
                return 415, "content_type", "request bodies must be application/json", {}
        return None

    def _session_refusal(self, scope: Scope, session: str
                         ) -> tuple[int, str, str, dict[str, str]] | None:
        """None if the status page's ``session`` may make this request."""
        assert self.ui is not None
        if scope["method"] not in ("GET", "HEAD") or not READ_PATHS.match(scope["path"]):
            self.ui.refuse("write")
            return 403, "session", ("the status page's session only reads the page's data; "
                                    "send the API token for anything else"), {}
        site = (_header(scope, b"sec-fetch-site") or "same-origin").lower()
        if _header(scope, UI_HEADER) != "1" or site != "same-origin":
            self.ui.refuse("csrf")
            return 403, "session", "not a request of the status page itself", {}
        reason = self.ui.admit(session)
        if reason == "rate":
            return 429, "session", "too many requests from the status page (ui.requests_per_s)", {}
        if reason is not None:
            return 401, "session", "the status page's session has expired: run `syncnode ui` " \
                                   "for a new sign-in link", {}
        return None


def _cookie(scope: Scope, name: str) -> str | None:
    """The value of cookie ``name`` in the request's Cookie header(s), if any."""
    for key, value in scope.get("headers", ()):
        if key != b"cookie":
            continue
        for part in bytes(value).decode("latin-1").split(";"):
            key_text, sep, found = part.strip().partition("=")
            if sep and key_text == name:
                return found
    return None


def _has_body(scope: Scope) -> bool:
    length = _header(scope, b"content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return _header(scope, b"transfer-encoding") is not None


async def _send_error(send: Send, status: int, message: str,
                      headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"error": message}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
