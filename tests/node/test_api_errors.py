"""Every 5xx of the API is logged with its request id and counted: real hypercorn, real HTTP."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
import pytest
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from node.api.app import internal_error, serve_api
from node.api.guard import ApiGuard, HostPolicy
from node.clock import SystemClock
from node.telemetry.metrics import Metrics


async def _boom(_request: Request) -> Response:
    raise RuntimeError("handler bug")


async def _broken_stream(_request: Request) -> Response:
    async def lines() -> AsyncIterator[bytes]:
        yield b"first\n"
        raise RuntimeError("stream bug")

    return StreamingResponse(lines())


@pytest.mark.trio
async def test_5xx_logged_with_request_id_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    app = Starlette(routes=[Route("/boom", _boom), Route("/stream", _broken_stream)],
                    exception_handlers={Exception: internal_error})
    guarded = ApiGuard(app, token="t" * 32, hosts=HostPolicy("127.0.0.1"), metrics=metrics,
                       clock=SystemClock())
    shutdown = trio.Event()
    caplog.set_level(logging.INFO, logger="syncnode.api")
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve_api, guarded, "127.0.0.1", 0, shutdown)
        headers = {"Authorization": "Bearer " + "t" * 32}

        def calls() -> tuple[httpx.Response, bool]:
            boom = httpx.get(url + "/boom", headers=headers)
            try:
                httpx.get(url + "/stream", headers=headers).read()
                cut = False
            except httpx.HTTPError:
                cut = True
            return boom, cut

        boom, _cut = await trio.to_thread.run_sync(calls)
        shutdown.set()
    assert boom.status_code == 500
    request_id = boom.headers["x-request-id"]
    assert request_id in boom.json()["error"]
    logged = [r for r in caplog.records
              if getattr(r, "fields", {}).get("request_id") == request_id]
    assert logged and any(r.exc_info for r in logged)
    assert any("stream bug" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    assert metrics.value("api_responses_total", status="500") == 2
    assert "syncnode_api_responses_total{status=\"500\"} 2" in metrics.render()
