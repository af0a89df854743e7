"""Idempotent publishes: an ``Idempotency-Key`` seen before returns the first answer again.

A client whose connection broke cannot tell whether its publish committed; retrying with the same
key is safe. The key and the answer are written in the same transaction as the event (so a
committed event always has its key, and a failed one never does), in ``node_state`` under
``idem/<key>``, and kept ``api.idempotency_ttl_s`` seconds: they survive a restart. Two requests
with one key at the same time are serialised: the second waits and gets the first one's answer.

At most ``api.idempotency_max_keys`` keys are held, whatever clients send: past that the oldest
are evicted (down to 99 % of the cap, so that the sort over all keys runs once per 1 % of the cap
new keys, not on every publish) and counted in ``api_idempotency_keys_evicted_total``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import trio
from sqlalchemy import Connection

from node.clock import Clock
from node.httpkit import ApiError
from node.store.events import EventStore
from node.telemetry.metrics import Metrics
from storage import count_state, delete_oldest_state, delete_state_before, get_state, put_state
from sync.sds import Delivered

__all__ = ["MAX_KEY_LENGTH", "IdempotencyKeys"]

PREFIX = "idem/"
MAX_KEY_LENGTH = 128
PRUNE_EVERY_S = 60.0


def check_key(key: str) -> str:
    if not 0 < len(key) <= MAX_KEY_LENGTH or not all("!" <= c <= "~" for c in key):
        raise ApiError(400, f"Idempotency-Key must be 1..{MAX_KEY_LENGTH} printable ASCII "
                            "characters without spaces")
    return key


class IdempotencyKeys:
    def __init__(self, store: EventStore, metrics: Metrics, clock: Clock, ttl_s: float,
                 max_keys: int) -> None:
        self.store = store
        self.clock = clock  # wall(): expiry times are stored; now(): the prune interval
        self.metrics = metrics
        self.ttl_ms = int(ttl_s * 1000)
        self.max_keys = max_keys
        self._inflight: dict[str, trio.Event] = {}
        self._last_prune = -float("inf")
        # Keys in the database: counted there at the first release, then kept up to date here.
        self._held: int | None = None
        # Claimed keys whose expired entry the publish overwrites (no new row).
        self._stale: set[str] = set()
        self._trim_lock = trio.Lock()

    @staticmethod
    def fingerprint(channel: str, content: bytes) -> str:
        return hashlib.sha256(channel.encode() + b"\0" + content).hexdigest()

    async def claim(self, key: str, fingerprint: str) -> dict[str, Any] | None:
        """The earlier answer for ``key``, or None after which the caller owns the key until
        ``release``. A key reused for a different publish is a 422."""
        while (waiting := self._inflight.get(key)) is not None:
            await waiting.wait()
        # Taken before the first await below: whoever comes next waits for this request.
        self._inflight[key] = trio.Event()
        try:
            raw = await self.store.read(get_state, PREFIX + key)
            if raw is not None:
                entry = json.loads(raw)
                if entry["expires_ms"] > self.clock.wall() * 1000:
                    if entry["fingerprint"] != fingerprint:
                        raise ApiError(422, "Idempotency-Key already used for a different "
                                            "publish")
                    self.metrics.inc("api_idempotent_replays_total")
                    self._wake(key)
                    return dict(entry["answer"])
                self._stale.add(key)
        except BaseException:
            self._wake(key)
            raise
        return None

    def _wake(self, key: str) -> None:
        self._stale.discard(key)
        event = self._inflight.pop(key, None)
        if event is not None:
            event.set()

    def writer(self, key: str, fingerprint: str,
               answer_of: Callable[[Delivered], dict[str, Any]]
               ) -> Callable[[Connection, Delivered], None]:
        """What ``ChannelService.publish`` writes in the event's transaction."""

        now_ms = int(self.clock.wall() * 1000)  # here: ``write`` runs in the store's thread

        def write(conn: Connection, delivered: Delivered) -> None:
            entry = {"fingerprint": fingerprint, "expires_ms": now_ms + self.ttl_ms,
                     "answer": answer_of(delivered)}
            put_state(conn, PREFIX + key, json.dumps(entry).encode(), now_ms)

        return write

    async def release(self, key: str, written: bool) -> None:
        """Hand ``key`` to the next request; ``written``: the publish committed it."""
        if self._held is not None and written and key not in self._stale:
            self._held += 1  # before any checkpoint: counted even if the request is cancelled
        self._wake(key)
        async with self._trim_lock:
            if self._held is None:  # the database's count includes this key
                self._held = await self.store.read(count_state, PREFIX)
            if self.clock.now() - self._last_prune > PRUNE_EVERY_S:
                self._last_prune = self.clock.now()
                cutoff = int(self.clock.wall() * 1000) - self.ttl_ms
                self._held -= await self.store.write(delete_state_before, PREFIX, cutoff)
            if self._held > self.max_keys:
                excess = self._held - self.max_keys + self.max_keys // 100
                evicted = await self.store.write(delete_oldest_state, PREFIX, excess)
                self._held -= evicted
                self.metrics.inc("api_idempotency_keys_evicted_total", evicted)
