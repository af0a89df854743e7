"""The local HTTP API: the app and its guard (host check, token, limits), routes, health,
OpenAPI, idempotency keys and the node-wide metric series.
"""

from __future__ import annotations

from node.api.app import (
    ApiError,
    ApiRoute,
    create_app,
    follow_rows,
    follow_stream,
    int_param,
    internal_error,
    read_body,
    read_json,
    serve_api,
)
from node.api.guard import (
    OPEN_PATHS,
    ApiGuard,
    HostPolicy,
    is_loopback_host,
)
from node.api.health import (
    HEALTH_ROUTES,
)
from node.api.idempotency import (
    MAX_KEY_LENGTH,
    IdempotencyKeys,
)
from node.api.node_metrics import (
    P2P_HELP,
    register_node_metrics,
    register_store_metrics,
)
from node.api.peer_routes import (
    PEER_ROUTES,
)
from node.api.routes import (
    NODE_ROUTES,
    event_json,
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
    "ERROR_SCHEMA",
    "HEALTH_ROUTES",
    "INT64_MAX",
    "MAX_KEY_LENGTH",
    "NODE_ROUTES",
    "OPEN_PATHS",
    "P2P_HELP",
    "PEER_ROUTES",
    "ApiError",
    "ApiGuard",
    "ApiRoute",
    "HostPolicy",
    "IdempotencyKeys",
    "Param",
    "RouteDoc",
    "arr",
    "create_app",
    "document",
    "event_json",
    "follow_rows",
    "follow_stream",
    "int_param",
    "internal_error",
    "is_loopback_host",
    "obj",
    "openapi_path",
    "read_body",
    "read_json",
    "register_node_metrics",
    "register_store_metrics",
    "serve_api",
]
