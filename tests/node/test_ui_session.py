"""The status page's sign-in and session rules: ``node.ui.UiSessions`` on a fixed clock, and the
guard's handling of the session cookie against a real node process over real HTTP (the browser's
view of the same rules: test_status_page.py)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from node.config.settings import UiSection
from node.telemetry.metrics import Metrics
from node.ui import UiSessions, cookie_name
from tests.harness.procs import NodeApi, running_node

pytestmark = pytest.mark.timeout(120)


class Clock:
    """A fixed clock (``node.clock.Clock``) the test moves by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    def wall(self) -> float:
        return self.t


def sessions(**section: float) -> tuple[UiSessions, Clock]:
    clock = Clock()
    return UiSessions(UiSection(**section), Metrics(), clock), clock


def test_a_link_works_once_and_only_within_its_ttl() -> None:
    ui, clock = sessions(link_ttl_s=60)
    nonce = ui.issue_link()
    assert ui.redeem(nonce) is not None
    assert ui.redeem(nonce) is None  # spent
    late = ui.issue_link()
    clock.t += 60
    assert ui.redeem(late) is None  # expired
    assert ui.redeem("made-up") is None
    assert ui.metrics.value("ui_links_total", outcome="refused") == 3
    assert ui.metrics.value("ui_links_total", outcome="used") == 1


def test_links_and_sessions_are_bounded_oldest_first() -> None:
    ui, clock = sessions(max_links=2, max_sessions=2, session_ttl_s=100)
    first, second, third = ui.issue_link(), ui.issue_link(), ui.issue_link()
    assert ui.redeem(first) is None  # pushed out by the third
    a, b = ui.redeem(second), ui.redeem(third)
    assert a is not None and b is not None
    c = ui.redeem(ui.issue_link())
    assert c is not None
    assert ui.admit(a) == "session"  # the oldest session was signed out
    assert ui.admit(b) is None and ui.admit(c) is None
    clock.t += 100
    assert ui.admit(b) == "session"  # expired


def test_a_session_gets_burst_requests_then_its_rate() -> None:
    ui, clock = sessions(burst=5, requests_per_s=2)
    session = ui.redeem(ui.issue_link())
    assert session is not None
    assert [ui.admit(session) for _ in range(6)] == [None] * 5 + ["rate"]
    clock.t += 1.0  # two more tokens
    assert [ui.admit(session) for _ in range(3)] == [None, None, "rate"]
    clock.t += 100  # refills up to the burst, not beyond
    assert [ui.admit(session) for _ in range(6)].count(None) == 5
    assert ui.metrics.value("ui_requests_refused_total", reason="rate") == 3


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeApi]:
    yield from running_node(tmp_path_factory.mktemp("ui"), in_process=True)


def sign_in(node: NodeApi) -> tuple[str, str]:
    """(the session cookie's name, its value) after trading a fresh link."""
    link = httpx.post(node.api_url + "/v1/ui/links", headers=node.headers).json()["url"]
    answer = httpx.get(link, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    set_cookie = answer.headers["set-cookie"]
    for attribute in ("HttpOnly", "SameSite=strict", "Path=/"):
        assert attribute.lower() in set_cookie.lower(), set_cookie
    name = cookie_name(httpx.URL(node.api_url).port)
    assert set_cookie.startswith(f"{name}=")
    assert httpx.get(link, follow_redirects=False).status_code == 403  # once only
    return name, set_cookie.split(";")[0].split("=", 1)[1]


PAGE = {"X-Syncnode-UI": "1"}


def test_the_session_reads_the_page_data_only(node: NodeApi) -> None:
    name, value = sign_in(node)
    jar = {name: value}

    def get(path: str, **headers: str) -> int:
        return httpx.get(node.api_url + path, cookies=jar, headers=headers).status_code

    for path in ("/v1/status", "/v1/channels", "/v1/peers", "/v1/ui/session"):
        assert get(path, **PAGE) == 200, path
    # Not what the page reads, or not a GET: refused although the session is good.
    for path in ("/metrics", "/openapi.json", "/v1/channels/general/follow",
                 "/v1/channels/general/events"):
        assert get(path, **PAGE) == 403, path
    before = node.status()["events"]
    post = httpx.post(node.api_url + "/v1/channels/general/events", cookies=jar,
                      headers=PAGE, json={"content": "through the cookie"})
    assert post.status_code == 403 and "only reads" in post.json()["error"]
    link = httpx.post(node.api_url + "/v1/ui/links", cookies=jar, headers=PAGE)
    assert link.status_code == 403  # a session cannot mint links either
    assert node.status()["events"] == before
    # No Sec-Fetch-Site at all (a browser that does not send it) is accepted: the page header
    # alone already needs a CORS preflight from any other origin (docs/security.md).
    assert "Sec-Fetch-Site" not in PAGE and get("/v1/status", **PAGE) == 200
    assert get("/v1/status", **PAGE, **{"Sec-Fetch-Site": "same-origin"}) == 200
    # Not from the page itself: no page header, or another site or origin says so.
    assert get("/v1/status") == 403
    assert get("/v1/status", **PAGE, **{"Sec-Fetch-Site": "same-site"}) == 403
    assert get("/v1/status", **PAGE, Origin="http://127.0.0.1:1") == 403
    # The API's Host rule holds for the page and its data (DNS rebinding).
    assert get("/v1/status", **PAGE, Host="evil.example") == 403
    assert httpx.get(node.api_url + "/", headers={"Host": "evil.example"}).status_code == 403
    # A made-up session is no session.
    fake = httpx.get(node.api_url + "/v1/status", cookies={name: "x" * 43}, headers=PAGE)
    assert fake.status_code == 401 and "syncnode ui" in fake.json()["error"]


def test_the_page_files_are_open_and_locked_down(node: NodeApi) -> None:
    page = httpx.get(node.api_url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["cache-control"] == "no-store"
    assert node.token not in page.text and "<script src=\"/ui/app.js\"" in page.text
    script = httpx.get(node.api_url + "/ui/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert "innerHTML" not in script.text  # data goes in as text only
    refused = httpx.get(node.api_url + "/ui/login", params={"nonce": "never-issued"})
    assert refused.status_code == 403 and "syncnode ui" in refused.text
