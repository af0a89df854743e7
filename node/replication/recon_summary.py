"""Saving the Recon key store's summary with its watermark, so a restart is bounded in time.

The watermark is the highest seq the key store has accounted: the store's writer commits in
seq order and ``ReconService`` accounts each commit's keys before the next commit is reported,
so at any moment of the trio thread the summary holds exactly the keys of ``seq <= watermark``.
A save copies the summary there (no await between), checks the log's rows since the last save
(``storage.log_matches``, a read), encodes it in a worker thread and writes it in one
transaction (``storage.save_summary``), every ``recon.summary_save_interval_s`` and
once more at clean shutdown (docs/architecture.md "Recon key store").
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import trio

from node.config.settings import ReconSection
from node.replication.clock import Clock
from node.store.events import EventStore
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from storage import AppendResult, OpenedKeyStore, log_matches, open_key_store, save_summary
from sync.recon import SummaryKeyStore, encode_summary

__all__ = ["SUMMARY_METRICS", "SummarySaver", "keystore_limits", "open_keys"]

log = logging.getLogger("syncnode.recon")

SUMMARY_METRICS = {
    "recon_summary_loads_total": "Start-ups of the Recon key store, by outcome: saved (the "
                                 "saved summary plus newer keys) or scan_<reason> (full scan)",
    "recon_summary_saves_total": "Saves of the Recon key store's summary, by outcome (saved, "
                                 "skipped: the log disagreed with it, failed: a database error)",
}


def keystore_limits(section: ReconSection) -> tuple[int, int, int]:
    """What bounds the key store's memory (docs/architecture.md "Recon key store"): keys per
    bucket, most buckets, cached keys."""
    return (section.keystore_bucket_keys, section.keystore_max_buckets,
            section.keystore_cache_keys)


async def open_keys(store: EventStore, section: ReconSection) -> OpenedKeyStore:
    """Open the key store in a worker thread (``storage.open_key_store``) and say how."""
    load, max_buckets, cache_keys = keystore_limits(section)
    opened = await trio.to_thread.run_sync(
        lambda: open_key_store(store.engine, load=load, max_buckets=max_buckets,
                               cache_keys=cache_keys))
    keys = opened.store
    # A fallback other than "no saved summary yet" means the saved one was unusable.
    level = logging.INFO if opened.outcome in ("saved", "scan_missing") else logging.WARNING
    log.log(level, "recon key store loaded", extra=kv(
        keys=len(keys), buckets=len(keys.summary), outcome=opened.outcome,
        watermark=opened.watermark, replayed=opened.replayed))
    return opened


class SummarySaver:
    """Keeps the watermark of a ``SummaryKeyStore`` and saves it with the summary."""

    def __init__(self, store: EventStore, metrics: Metrics, interval_s: float,
                 clock: Clock, opened: OpenedKeyStore) -> None:
        """``opened``: the key store as :func:`open_keys` loaded it (what it holds is saved)."""
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.interval_s = interval_s
        self.watermark = opened.watermark
        # (watermark, total) of the last save or load: the next save checks the log since;
        # and whether the saved row is that state (not after a scan or a replay at start-up).
        self._saved = (opened.watermark, opened.total)
        self._row_current = opened.outcome == "saved" and not opened.replayed
        for name, help_text in SUMMARY_METRICS.items():
            metrics.describe(name, "counter", help_text)
        metrics.inc("recon_summary_loads_total", outcome=opened.outcome)

    def committed(self, result: AppendResult) -> None:
        """Called with every commit, as its keys enter the key store."""
        if result.inserted:
            self.watermark = max(self.watermark, max(seq for seq, _ in result.inserted))

    async def run(self, keys: SummaryKeyStore,
                  locked: Callable[[], AbstractContextManager[bool]] | None = None) -> None:
        while True:
            await trio.sleep(self.interval_s)
            await self.save(keys, locked)

    async def save(self, keys: SummaryKeyStore,
                   locked: Callable[[], AbstractContextManager[bool]] | None = None) -> bool:
        """Save ``keys``' summary if anything changed since the last save; True if written.
        ``locked``: the key store to ourselves (True) or busy in a Recon worker (False: this
        round is skipped; the watermark is only right for a summary with every key applied)."""
        with locked() if locked is not None else nullcontext(True) as free:
            if not free:
                return False
            watermark, total = self.watermark, len(keys)
            if (watermark, total) == self._saved and self._row_current:
                return False
            summary = keys.summary
            parts = (summary.load, list(summary.starts), list(summary.counts),
                     list(summary.wides))
        check = functools.partial(log_matches, watermark=watermark, total=total,
                                  since=self._saved)
        write = functools.partial(save_summary, watermark=watermark, total=total,
                                  now_ms=int(self.clock.wall() * 1000))
        try:
            written = await self.store.read(check)
            if written:
                blob = await trio.to_thread.run_sync(encode_summary, *parts)
                written = await self.store.write(write, blob)
        except Exception as exc:  # a database error: the last save stays, try again later
            self.metrics.inc("recon_summary_saves_total", outcome="failed")
            log.warning("recon summary not saved", extra=kv(error=repr(exc)))
            return False
        if not written:
            self.metrics.inc("recon_summary_saves_total", outcome="skipped")
            log.warning("recon summary not saved: the log disagrees with it",
                        extra=kv(watermark=watermark, keys=total))
            return False
        self._saved = (watermark, total)
        self._row_current = True
        self.metrics.inc("recon_summary_saves_total", outcome="saved")
        log.info("recon summary saved", extra=kv(watermark=watermark, keys=total,
                                                 buckets=len(parts[1]), bytes=len(blob)))
        return True
