"""Cyclic garbage collection as a running node sees it: how long each collection stopped the
node's threads, and the objects of its start-up frozen out of the collector.

CPython's cycle collector runs in whichever thread allocates when a generation fills up, and
holds the GIL while it walks every object of the generations it collects: the trio thread, the
store's writer, the Recon worker and the API all stop. A full collection (generation 2) walks
every tracked object of the process, and a started node holds ~160,000 of them (modules,
classes, functions, libp2p's and SQLAlchemy's structures), nearly all alive until it exits: on
this machine one such walk takes ~90 ms idle, 115-140 ms under a Recon flood, which brings one
every few seconds. ``gc.freeze()`` once the node has started (``node.gc_freeze``, on by
default) moves what exists then into a permanent generation that no collection walks, after
one last full collection (garbage frozen would stay); what is frozen and later dropped is still
freed by its reference count. Under the attack benchmark's flood the collector then stopped
the node 0.32-0.48 s in all instead of 0.92-1.14 s, 35-54 ms per full collection.

:class:`GcPauses` hooks ``gc.callbacks`` and counts the collections and the seconds they took,
read by ``/metrics`` (``gc_pause_seconds_total``, ``gc_full_collections_total``,
``gc_pause_max_seconds``, ``gc_frozen_objects``). The hook runs in any thread, inside the
collector, so it only adds to numbers of its own (no lock, no metric call);
``time.perf_counter`` is its clock, since trio's cannot be read from any thread, and what it
measures is time stopped, not a time the cores compare.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from node.telemetry.metrics import Metrics

__all__ = ["GcPauses"]


class GcPauses:
    """The collector's pauses since :meth:`install`."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full_collections = 0
        self.longest = 0.0
        self._began = 0.0

    def install(self) -> None:
        gc.callbacks.append(self._hook)

    def uninstall(self) -> None:
        if self._hook in gc.callbacks:
            gc.callbacks.remove(self._hook)

    def _hook(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        took = time.perf_counter() - self._began
        self.seconds += took
        self.full_collections += info["generation"] == 2
        self.longest = max(self.longest, took)

    @staticmethod
    def freeze() -> int:
        """Move every object tracked now out of all future collections, after one last full
        collection (garbage frozen would never be collected); how many are frozen."""
        gc.collect()
        gc.freeze()
        return gc.get_freeze_count()

    def register(self, metrics: Metrics) -> None:
        metrics.counter_fn("gc_pause_seconds_total", lambda: self.seconds,
                           "Seconds cyclic garbage collections stopped the node's threads")
        metrics.counter_fn("gc_full_collections_total", lambda: float(self.full_collections),
                           "Full (generation 2) cyclic garbage collections")
        metrics.gauge_fn("gc_pause_max_seconds", lambda: self.longest,
                         "The longest cyclic garbage collection since the node started")
        metrics.gauge_fn("gc_frozen_objects", lambda: float(gc.get_freeze_count()),
                         "Objects of the node's start-up no garbage collection walks")
