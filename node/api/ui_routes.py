"""The status page's routes: its files at ``/`` and ``/ui/...``, the one-time sign-in link
(``POST /v1/ui/links`` with the token, then ``GET /ui/login?nonce=``) and its session's facts.

Every answer of the page forbids framing, sniffing, referrers and caching, and its content
security policy allows nothing but this origin's own files and JSON: no inline script, no
other host (docs/ops/README.md, "The status page").
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from node.httpkit import ApiError, ApiRoute
from node.httpkit.openapi import Param, RouteDoc, obj
from node.ui.sessions import UiSessions, cookie_name

__all__ = ["PAGE_HEADERS", "ui_routes"]

PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self'; connect-src 'self'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}
_FILES = {"/": ("index.html", "text/html; charset=utf-8"),
          "/ui/app.js": ("app.js", "text/javascript; charset=utf-8"),
          "/ui/style.css": ("style.css", "text/css; charset=utf-8"),
          "/ui/icon.svg": ("icon.svg", "image/svg+xml")}
_REFUSED_LINK = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>syncnode: sign-in link refused</title></head><body>
<h1>This sign-in link cannot be used</h1>
<p>Each link from <code>syncnode ui</code> works once, for a short time. Run
<code>syncnode ui</code> again for a new one.</p></body></html>"""


def _static(name: str) -> bytes:
    return (resources.files("node.ui") / "static" / name).read_bytes()


def ui_routes(sessions: UiSessions) -> list[ApiRoute]:
    files = {path: (_static(name), media) for path, (name, media) in _FILES.items()}

    async def page(_node: object, request: Request) -> Response:
        body, media = files[request.url.path]
        return Response(body, media_type=media, headers=PAGE_HEADERS)

    async def link(_node: object, request: Request) -> Response:
        nonce = sessions.issue_link()
        base = f"{request.url.scheme}://{request.headers['host']}"
        return JSONResponse({"url": f"{base}/ui/login?nonce={nonce}",
                             "expires_in_s": sessions.section.link_ttl_s})

    async def login(_node: object, request: Request) -> Response:
        session = sessions.redeem(request.query_params.get("nonce", ""))
        if session is None:
            return HTMLResponse(_REFUSED_LINK, status_code=403, headers=PAGE_HEADERS)
        answer = RedirectResponse("/", status_code=303, headers=PAGE_HEADERS)
        answer.set_cookie(cookie_name(request.url.port), session,
                          max_age=int(sessions.section.session_ttl_s), path="/",
                          httponly=True, samesite="strict")
        return answer

    async def about(_node: object, request: Request) -> Response:
        session = request.cookies.get(cookie_name(request.url.port))
        if request.headers.get("authorization") is not None or session is None:
            raise ApiError(404, "no status page session in this request (the token was sent)")
        return JSONResponse({"expires_in_s": sessions.expires_in(session),
                             "refresh_s": sessions.section.refresh_s})

    html = RouteDoc(media="text/html", open=True, response={"type": "string"})
    return [
        ApiRoute("GET", "/", "The status page (read-only; sign in with `syncnode ui`)", page,
                 html),
        *(ApiRoute("GET", path, f"A file of the status page ({name})", page,
                   RouteDoc(media=media.split(";")[0], open=True, response={"type": "string"}))
          for path, (name, media) in _FILES.items() if path != "/"),
        ApiRoute("POST", "/v1/ui/links", "A one-time sign-in link to the status page", link,
                 RouteDoc(response=obj({"url": {"type": "string"},
                                        "expires_in_s": {"type": "number"}}))),
        ApiRoute("GET", "/ui/login", "Trade a sign-in link's nonce for a session cookie "
                 "(HttpOnly, SameSite=Strict) and go to /", login, RouteDoc(
                     params=(Param("nonce", "query", {"type": "string"},
                                   "The nonce of a link from POST /v1/ui/links", True),),
                     status=303, media="text/html", open=True, error_media="text/html",
                     errors={403: "The link was used before, expired or never issued"})),
        ApiRoute("GET", "/v1/ui/session", "The status page's session: time left and refresh "
                 "interval (with the session cookie)", about, RouteDoc(
                     response=obj({"expires_in_s": {"type": ["number", "null"]},
                                   "refresh_s": {"type": "number"}}),
                     errors={404: "No session cookie in the request"})),
    ]
