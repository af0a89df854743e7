"""Attack 3 of issue 28 as a reusable harness: hostile identities pushing Recon messages at a
node while an honest client measures its publish latency (the hostile test and the attack
benchmark both use it)."""

from __future__ import annotations

import math
import threading
import time

import httpx
import trio

from tests.harness.cluster import metric, wait_for
from tests.harness.hostile import recon_flood, recon_flood_frame
from tests.harness.procs import NodeProcess

__all__ = ["Flood", "percentile_ms", "publish_latencies", "wait_flood_started"]


def publish_latencies(node: NodeProcess, count: int, gap_s: float = 0.05,
                      prefix: str = "lat", within_s: float = 90.0) -> list[float]:
    """Seconds each of ``count`` sequential publishes took (one client, ``gap_s`` apart); a
    publish that failed (no answer, an error status) counts as infinitely slow, and so do the
    publishes that did not get their turn within ``within_s``."""
    out: list[float] = []
    deadline = time.monotonic() + within_s
    with node.client(timeout=30) as client:
        for k in range(count):
            if time.monotonic() > deadline:
                return out + [math.inf] * (count - k)
            started = time.monotonic()
            try:
                r = client.post("/v1/channels/general/events",
                                json={"content": f"{prefix}-{k}"})
                ok = r.status_code == 200
            except httpx.HTTPError:
                ok = False
            out.append(time.monotonic() - started if ok else math.inf)
            time.sleep(gap_s)
    return out


def percentile_ms(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values`` seconds, in ms."""
    ranked = sorted(values)
    value = ranked[min(len(ranked) - 1, int(q * len(ranked)))]
    return round(value * 1000, 1) if math.isfinite(value) else math.inf


class Flood:
    """``identities`` fresh hostile hosts, each sending Recon messages of ``items`` made-up
    ranges back to back to ``target`` until ``stop()``; runs in its own thread and trio loop."""

    def __init__(self, target: str, identities: int = 10, items: int = 60_000) -> None:
        self.target, self.identities = target, identities
        self.frame = recon_flood_frame(items=items)
        self.answered = 0
        self.sent = 0
        self._stop: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)

    def start(self) -> Flood:
        self._thread.start()
        self._started.wait(30)
        return self

    async def _main(self) -> None:
        self._stop = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        self._started.set()

        async def one() -> None:
            # A refused or banned identity keeps trying until the end (its dials then fail).
            while not self._stop.is_set():  # type: ignore[union-attr]
                try:
                    self.answered += await recon_flood(self.target, self.frame, 1_000_000,
                                                       stop=self._stop, timeout=15,
                                                       on_sent=self._sent)
                except Exception:  # refused, reset, banned: try again
                    await trio.sleep(0.2)

        async with trio.open_nursery() as nursery:
            for _ in range(self.identities):
                nursery.start_soon(one)
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def _sent(self) -> None:
        self.sent += 1

    def stop(self) -> None:
        if self._token is not None and self._stop is not None:
            self._token.run_sync_soon(self._stop.set)
        self._thread.join(timeout=60)


def wait_flood_started(victim: NodeProcess, flood: Flood, identities: int) -> None:
    """Every identity has reached the node: as many whole messages sent, or the node charging
    as many identities (a refusal can reset a stream before the whole frame is written, so
    ``sent`` alone may stay low while the flood runs: the CI flake "did not start")."""
    wait_for(lambda: flood.sent >= identities
             or metric(victim, "work_budgets_tracked") >= identities,
             60, "the Recon flood did not start")
