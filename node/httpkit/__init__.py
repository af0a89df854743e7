"""The HTTP toolkit every route table builds on (errors, route declarations, bounded bodies and
JSON, follow streams, the OpenAPI description). It imports nothing else of ``node``.
"""

from __future__ import annotations

from node.httpkit.kit import (
    DEFAULT_FOLLOW_BUFFER,
    DEFAULT_MAX_BODY,
    FOLLOW_POLL_S,
    MAX_JSON_DEPTH,
    ApiError,
    ApiRoute,
    Counters,
    Handler,
    MetricsOwner,
    follow_rows,
    follow_stream,
    int_param,
    internal_error,
    read_body,
    read_json,
)
from node.httpkit.openapi import (
    ERROR_SCHEMA,
    INT64_MAX,
    Param,
    RouteDoc,
    arr,
    document,
    obj,
    openapi_path,
)

__all__ = [
    "DEFAULT_FOLLOW_BUFFER",
    "DEFAULT_MAX_BODY",
    "ERROR_SCHEMA",
    "FOLLOW_POLL_S",
    "INT64_MAX",
    "MAX_JSON_DEPTH",
    "ApiError",
    "ApiRoute",
    "Counters",
    "Handler",
    "MetricsOwner",
    "Param",
    "RouteDoc",
    "arr",
    "document",
    "follow_rows",
    "follow_stream",
    "int_param",
    "internal_error",
    "obj",
    "openapi_path",
    "read_body",
    "read_json",
]
