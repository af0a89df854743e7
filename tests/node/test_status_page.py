"""The status page in a real browser (Debian's chromium, driven by Playwright, which never
downloads one) against real node processes: the one-time link signs in and leaves only ``/``
in the address bar; the page shows live figures (events published while it is open appear);
the link cannot be used twice; a page of another origin (another port of 127.0.0.1, and
``localhost``: cross-site) can neither read the node's data nor write through the session; the
session cannot write even from the page itself, and its request rate is bounded."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT
from tests.harness.cluster import start_inproc, wait_for
from tests.harness.procs import NodeApi

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TABLES = {"users": {"columns": {"name": "text", "age": "integer", "admin": "boolean"}},
          "rooms": {"columns": {"title": "text"}}}
# A session may make 12 requests at once, then 6 a second: the page's refresh (6 requests every
# second here) fits, a burst of 60 does not.
ENV = {"SYNCNODE_DB_TABLES": json.dumps(TABLES), "SYNCNODE_P2P_CHANNELS": "general,ops",
       "SYNCNODE_UI_REFRESH_S": "1.0", "SYNCNODE_UI_BURST": "12",
       "SYNCNODE_UI_REQUESTS_PER_S": "8"}
SCREENSHOT = ROOT / "docs" / "ops" / "status-page.png"

# What a page of another origin tries with the browser's session cookie; each outcome is
# "blocked: ..." or what it could read.
EVIL_PAGE = """<!doctype html><html><body><script>
const NODE = "%(node)s";
async function attempt(name, run) {
  try { const got = await run(); window.results[name] = "read: " + got; }
  catch (e) { window.results[name] = "blocked: " + e; }
}
window.results = {};
(async () => {
  await attempt("read_status", async () => (await fetch(NODE + "/v1/status",
      {credentials: "include"})).text());
  await attempt("read_with_page_header", async () => (await fetch(NODE + "/v1/status",
      {credentials: "include", headers: {"X-Syncnode-UI": "1"}})).text());
  await attempt("publish_no_cors", async () => {
    const r = await fetch(NODE + "/v1/channels/general/events", {method: "POST", mode: "no-cors",
        credentials: "include", headers: {"Content-Type": "text/plain"},
        body: JSON.stringify({content: "evil"})});
    return "opaque " + r.type + " " + r.status;  // opaque: nothing readable
  });
  await attempt("publish_json", async () => (await fetch(NODE + "/v1/channels/general/events",
      {method: "POST", credentials: "include", headers: {"Content-Type": "application/json"},
       body: JSON.stringify({content: "evil"})})).text());
  await attempt("frame", () => new Promise((resolve, reject) => {
    const frame = document.createElement("iframe");
    frame.src = NODE + "/";
    frame.onload = () => { try { resolve(frame.contentDocument.body.innerText); }
                           catch (e) { reject(e); } };
    document.body.appendChild(frame);
    setTimeout(() => reject(new Error("frame timeout")), 5000);
  }));
  window.done = true;
})();
</script></body></html>"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def evil_site(tmp_path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """A plain HTTP server of another origin (another port on the loopback) serving one page."""
    pages: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path.split("?")[0], "").encode()
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], pages
    finally:
        server.shutdown()
        server.server_close()


def publish(node: NodeApi, channel: str, count: int) -> None:
    with node.client() as client:
        for i in range(count):
            client.post(f"/v1/channels/{channel}/events",
                        json={"content": f"{channel} {i}"}).raise_for_status()


def link_of(node: NodeApi) -> str:
    result = node.cli("ui", "--json")
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout)["url"])


def labelled(node: NodeApi, name: str, **labels: str) -> float:
    """The value of one labelled series of ``name`` on ``node`` (0 if absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    series = f"syncnode_{name}{{{want}}}" if want else f"syncnode_{name}"
    for line in node.get("/metrics").splitlines():
        if line.split(" ")[0] == series:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def figure(page: Any, selector: str) -> int:
    text = page.locator(selector).inner_text().replace(",", "")
    return int(text) if text.isdigit() else -1


@pytest.mark.timeout(240)
def test_status_page_in_a_real_browser(tmp_path: Path,
                                       evil_site: tuple[int, dict[str, str]]) -> None:
    assert CHROMIUM.exists(), "chromium missing: run `make setup` (scripts/setup_chromium.sh)"
    from playwright.sync_api import sync_playwright

    first = start_inproc(tmp_path, "n1", env=ENV)
    second = start_inproc(tmp_path, "n2", env=ENV, bootstrap=[first])
    try:
        wait_for(lambda: len(first.get("/v1/peers")["connected"]) == 1, 60, "no peer")
        wait_for(lambda: len(first.get("/v1/db")["tables"]) == 2, 60, "tables not declared")
        publish(first, "general", 12)
        publish(second, "ops", 5)
        with first.client() as client:
            for i, name in enumerate(["ada", "grace", "linus"]):
                client.post("/v1/db/users", json={"op": "upsert", "id": f"u{i}", "values": {
                    "name": name, "age": 30 + i, "admin": i == 0}}).raise_for_status()
        port, pages = evil_site
        node_origin = first.api_url
        link = link_of(first)
        assert "nonce=" in link and first.token not in link
        with sync_playwright() as driver:
            context = driver.chromium.launch_persistent_context(
                str(tmp_path / "profile"), executable_path=str(CHROMIUM), headless=True,
                args=ARGS, viewport={"width": 1360, "height": 940})
            try:
                check_page(context, first, link, tmp_path)
                check_cross_origin(context, first, node_origin, port, pages)
            finally:
                context.close()
    finally:
        second.kill()
        first.kill()


def check_page(context: Any, node: NodeApi, link: str, tmp_path: Path) -> None:
    page = context.new_page()
    page.goto(link)
    # The redirect left only "/" in the address bar (and so in the history).
    assert page.url == node.api_url + "/", page.url
    page.wait_for_function("() => document.body.dataset.updated !== undefined", timeout=30_000)
    cookies = [c for c in context.cookies() if c["name"].startswith("syncnode_ui_")]
    assert len(cookies) == 1 and cookies[0]["httpOnly"] and cookies[0]["sameSite"] == "Strict"
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script reads it
    assert labelled(node, "ui_sessions") == 1
    assert node.token not in page.content()
    # Live figures: events published now appear without reloading.
    before = figure(page, "#t-events")
    assert 12 <= before <= node.status()["events"]  # what the node said at the last refresh
    publish(node, "general", 7)
    page.wait_for_function(f"() => Number(document.getElementById('t-events').textContent"
                           f".replace(/,/g, '')) >= {before + 7}", timeout=30_000)
    general = page.locator("#channels tr[data-channel='general'] td").nth(1).inner_text()
    assert int(general.replace(",", "")) >= 19
    users = page.locator("#tables tr[data-table='users'] td").nth(1).inner_text()
    assert users == "3"
    assert page.locator("#peers tbody tr").count() == 1
    assert page.locator("#signed-out").is_hidden()
    check_sync_and_times(page, node)
    # Events keep arriving while the screenshot is taken, so that the rates show.
    trickle = threading.Thread(target=lambda: [publish(node, c, 1) or time.sleep(0.15)
                                               for c in ["general", "ops"] * 12])
    trickle.start()
    page.wait_for_timeout(2500)
    page.screenshot(path=str(tmp_path / "status-page.png"), full_page=True)
    trickle.join()
    if os.environ.get("SYNCNODE_UPDATE_SCREENSHOT"):
        shutil.copy(tmp_path / "status-page.png", SCREENSHOT)
    # The session reads, and only reads: a write from the page itself is refused.
    status = page.evaluate("""async () => (await fetch('/v1/channels/general/events', {
        method: 'POST', headers: {'X-Syncnode-UI': '1', 'Content-Type': 'application/json'},
        body: JSON.stringify({content: 'from the page'})})).status""")
    assert status == 403
    assert labelled(node, "ui_requests_refused_total", reason="write") == 1
    # The link worked once: a second use is refused and signs nobody in.
    again = context.new_page()
    answer = again.goto(link)
    assert answer is not None and answer.status == 403
    assert "cannot be used" in again.content()
    assert labelled(node, "ui_links_total", outcome="refused") == 1
    assert labelled(node, "ui_links_total", outcome="used") == 1
    again.close()
    # A burst beyond ui.burst is refused (429) and counted.
    codes = page.evaluate("""async () => Promise.all([...Array(40)].map(async () =>
        (await fetch('/v1/status', {headers: {'X-Syncnode-UI': '1'}})).status))""")
    assert 200 in codes and 429 in codes, codes
    assert labelled(node, "ui_requests_refused_total", reason="rate") >= codes.count(429)
    page.close()
    # Without the session the page says how to sign in.
    context.clear_cookies()
    bare = context.new_page()
    bare.goto(node.api_url + "/")
    bare.wait_for_selector("#signed-out:not([hidden])", timeout=30_000)
    assert "syncnode ui" in bare.locator("#signed-out").inner_text()
    bare.close()


def check_sync_and_times(page: Any, node: NodeApi) -> None:
    """The sync status (in total and per peer), Lamport times as raw numbers, times in UTC ISO
    like the CLI. Every check runs and each failure is listed."""
    from playwright.sync_api import Error as PageError

    problems: list[str] = []
    iso = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
    selector = "#channels tr[data-channel='ops'] td"
    for _ in range(3):
        # The other node's ops events may still be arriving (by gossip, or a Recon round
        # later): give the page's refresh the time to show what the node holds now.
        lamports = {c["channel"]: c["lamport"] for c in node.get("/v1/channels")["channels"]}
        try:
            page.wait_for_function(
                "([sel, want]) => document.querySelectorAll(sel)[6]?.textContent === want",
                arg=[selector, str(lamports["ops"])], timeout=10_000)
            break
        except PageError:
            continue
    cell = page.locator(selector).nth(6).inner_text()
    if not (cell == str(lamports["ops"]) and lamports["ops"] > 10**12):
        problems.append(f"Lamport time not the raw number: {cell!r} for {lamports['ops']}")
    live = page.locator("#live-text").inner_text()
    if not re.fullmatch(rf"live · {iso}", live):
        problems.append(f"refresh time not UTC ISO: {live!r}")
    title = page.locator("#peers tbody tr td").nth(4).locator("span")
    if not (title.count() and re.fullmatch(iso, title.get_attribute("title") or "")):
        problems.append("no UTC time on the peer's connected-since cell")
    peer = node.get("/v1/peers")["connected"][0]["peer_id"]
    try:
        page.wait_for_function("() => document.getElementById('t-sync').dataset.state === "
                               "'in_sync'", timeout=60_000)
        page.wait_for_function(f"() => document.querySelector(\"#peers tr[data-peer='{peer}'] "
                               f"td:last-child\").textContent === 'in sync'", timeout=30_000)
        # Behind: how many events and how fast it catches up, drawn by the page's own code.
        shown = page.evaluate("""() => { renderSync({state: 'behind', behind: 3000,
            rate_per_s: 812.4, eta_s: 3.7, text: 'behind ~3000 events, catching up at 812/s',
            peers: {}});
            return [document.getElementById('t-sync').textContent,
                    document.getElementById('t-sync-detail').textContent]; }""")
        if shown != ["behind ~3,000", "catching up at 812/s · about 4s left"]:
            problems.append(f"behind drawn as {shown}")
    except PageError as exc:
        problems.append(f"no sync status: {str(exc).splitlines()[0]}")
    assert not problems, problems


def check_cross_origin(context: Any, node: NodeApi, node_origin: str, port: int,
                       pages: dict[str, str]) -> None:
    # Sign in again (the previous check cleared the cookies), then visit the other origins.
    page = context.new_page()
    page.goto(link_of(node))
    assert page.url == node.api_url + "/"
    page.close()
    events_before = node.status()["events"]
    refused_before = labelled(node, "api_refused_total", reason="origin")
    pages["/evil.html"] = EVIL_PAGE % {"node": node_origin}
    for host in ("127.0.0.1", "localhost"):  # same site other port; another site
        evil = context.new_page()
        evil.goto(f"http://{host}:{port}/evil.html")
        evil.wait_for_function("() => window.done === true", timeout=30_000)
        results: dict[str, str] = evil.evaluate("window.results")
        for name, outcome in results.items():
            if name == "publish_no_cors":
                assert outcome.startswith(("read: opaque opaque 0", "blocked")), (host, outcome)
            else:
                assert outcome.startswith("blocked"), (host, name, outcome)
            assert node.peer_id not in outcome, (host, name, outcome)
        evil.close()
    # Nothing was written, and the node refused the cross-origin requests that reached it.
    assert node.status()["events"] == events_before
    assert labelled(node, "api_refused_total", reason="origin") > refused_before
    with httpx.Client(base_url=node.api_url, headers=node.headers) as client:
        contents = [e["content"] for e in client.get(
            "/v1/channels/general/events", params={"limit": 1000}).json()["events"]]
    assert "evil" not in contents and "from the page" not in contents
