"""What ``POST /v1/channels/{channel}/events`` accepts: one event's content, or a batch.

A batch body, ``{"events": [{"content": "..."} | {"content_b64": "..."}, ...]}``, publishes
its events in order as one store item: one transaction (one fsync) for all of them, and one
answer after it committed, ``{"events": [<the single publish's answer>, ...]}``. It is bounded
by ``api.publish_batch_max_events`` (events) and ``api.publish_batch_max_bytes`` (the request
body); an empty or oversized batch, or a bad item (named by its index), refuses the whole
request before anything is published (docs/node.md, "Publishing many events").
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from node.httpkit import ApiError

__all__ = ["MAX_CONTENT_BYTES", "batch_contents", "content_of"]

MAX_CONTENT_BYTES = 512 * 1024
_SHAPE = 'body must be {"content": "..."} or {"content_b64": "..."}'


def content_of(body: Any) -> bytes:
    """One event's content from ``{"content": text}`` or ``{"content_b64": base64}``."""
    if not isinstance(body, dict):
        raise ApiError(400, _SHAPE)
    if isinstance(body.get("content"), str):
        content: bytes = body["content"].encode("utf-8")
    elif isinstance(body.get("content_b64"), str):
        try:
            content = base64.b64decode(body["content_b64"], validate=True)
        except binascii.Error:
            raise ApiError(400, "content_b64 is not valid base64") from None
    else:
        raise ApiError(400, _SHAPE)
    if not content:
        raise ApiError(400, "content must not be empty (empty content is an SDS sync message)")
    if len(content) > MAX_CONTENT_BYTES:
        raise ApiError(413, f"content over {MAX_CONTENT_BYTES} bytes")
    return content


def batch_contents(body: Any, max_events: int) -> list[bytes] | None:
    """The contents of a batch body, in order; None when ``body`` is a single event's."""
    if not isinstance(body, dict) or "events" not in body:
        return None
    items = body["events"]
    if not isinstance(items, list) or set(body) != {"events"}:
        raise ApiError(400, 'a batch body is {"events": [{"content": "..."}, ...]} and nothing '
                            "else")
    if not items:
        raise ApiError(400, "a batch holds at least one event")
    if len(items) > max_events:
        raise ApiError(413, f"batch of {len(items)} events over api.publish_batch_max_events "
                            f"({max_events})")
    contents = []
    for i, item in enumerate(items):
        try:
            contents.append(content_of(item))
        except ApiError as exc:
            raise ApiError(exc.status, f"events[{i}]: {exc.message}") from None
    return contents
