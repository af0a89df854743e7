"""One-line structured logging: ``ts=... level=... logger=... msg="..." key=value`` or JSON."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

__all__ = ["configure_logging", "kv"]

_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def kv(**fields: Any) -> dict[str, Any]:
    """Structured fields for a log call: ``log.info("stored", extra=kv(events=3))``."""
    return {"fields": fields}


def _quote(value: Any) -> str:
    text = str(value)
    if not text or any(c in text for c in ' "=\n'):
        return json.dumps(text)
    return text


class _Formatter(logging.Formatter):
    def __init__(self, as_json: bool) -> None:
        super().__init__()
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        ts += f".{int(record.msecs):03d}Z"
        fields: dict[str, Any] = dict(getattr(record, "fields", {}) or {})
        extra = {k: v for k, v in vars(record).items() if k not in _RESERVED and k != "fields"}
        fields.update(extra)
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info).replace("\n", " | ")
        base = {"ts": ts, "level": record.levelname.lower(), "logger": record.name,
                "msg": record.getMessage()}
        if self.as_json:
            return json.dumps({**base, **fields}, default=str)
        return " ".join(f"{k}={_quote(v)}" for k, v in {**base, **fields}.items())


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(fmt == "json"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # libp2p and friends are chatty at INFO; their warnings still come through.
    for noisy in ("libp2p", "multiaddr", "hypercorn", "async_service", "httpx", "httpcore",
                  "alembic", "py4j"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
