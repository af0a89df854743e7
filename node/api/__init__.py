"""The local HTTP API: the app and its guard (host check, token, limits), routes, health,
idempotency keys and the node-wide metric series. The toolkit and the OpenAPI description it
builds on are ``node.httpkit``.
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
    register_p2p_metrics,
    register_store_metrics,
)
from node.api.peer_routes import (
    PEER_ROUTES,
)
from node.api.routes import (
    NODE_ROUTES,
    event_json,
)

__all__ = [
    "HEALTH_ROUTES",
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
    "create_app",
    "event_json",
    "follow_rows",
    "follow_stream",
    "int_param",
    "internal_error",
    "is_loopback_host",
    "read_body",
    "read_json",
    "register_node_metrics",
    "register_p2p_metrics",
    "register_store_metrics",
    "serve_api",
]
