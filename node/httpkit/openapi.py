"""The OpenAPI 3.1 description of the local API, built from the route declarations.

Each route declares its parameters, body and answer with the small helpers here (JSON Schema
2020-12, which OpenAPI 3.1 uses as is), so the document served at ``/openapi.json`` is the same
table the server routes from and cannot drift from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ERROR_SCHEMA",
    "INT64_MAX",
    "Param",
    "RouteDoc",
    "arr",
    "document",
    "obj",
    "openapi_path",
]

INT64_MAX = 2**63 - 1

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string", "description": "One line saying what is wrong"}},
}

# What every authenticated route may answer besides its own errors.
COMMON_ERRORS: dict[int, str] = {
    401: "Missing or wrong API token",
    403: "Host header not naming this node, or a cross-origin browser request",
    500: "Internal error (logged with the X-Request-Id of the response)",
}
BODY_ERRORS: dict[int, str] = {
    400: "Body is not valid JSON or not of the documented shape",
    408: "Body not received within api.body_timeout_s",
    413: "Body over the route's size limit",
    415: "Body is not application/json",
}
OPEN_ERRORS: dict[int, str] = {403: COMMON_ERRORS[403], 500: COMMON_ERRORS[500]}


def obj(required: dict[str, Any], optional: dict[str, Any] | None = None,
        *, extra: bool = True, description: str = "") -> dict[str, Any]:
    """A JSON object schema; ``extra``: whether more properties than those listed may appear."""
    schema: dict[str, Any] = {
        "type": "object",
        "required": sorted(required),
        "properties": {**required, **(optional or {})},
    }
    if not extra:
        schema["additionalProperties"] = False
    if description:
        schema["description"] = description
    return schema


def arr(items: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"type": "array", "items": items, **more}


@dataclass(frozen=True)
class Param:
    name: str
    where: str  # "path" | "query" | "header"
    schema: dict[str, Any]
    description: str
    required: bool = False

    def as_openapi(self) -> dict[str, Any]:
        return {"name": self.name, "in": self.where, "required": self.required or
                self.where == "path", "description": self.description, "schema": self.schema}


@dataclass(frozen=True)
class RouteDoc:
    """What a route takes and answers, for the description (not checked at run time)."""

    params: tuple[Param, ...] = ()
    body: dict[str, Any] | None = None
    response: dict[str, Any] | None = None
    status: int = 200
    media: str = "application/json"
    errors: dict[int, str] = field(default_factory=dict)
    open: bool = False  # answers without the token (on a loopback API)
    error_media: str = "application/json"  # what its own errors (``errors``) are


def openapi_path(path: str) -> str:
    """Starlette's ``{name:converter}`` as OpenAPI's plain ``{name}``."""
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)


def _content(media: str, schema: dict[str, Any] | None) -> dict[str, Any]:
    if schema is None:
        schema = {"type": "string"} if media.startswith("text/") else {}
    return {media: {"schema": schema}}


def _operation(method: str, path: str, summary: str, doc: RouteDoc) -> dict[str, Any]:
    operation_id = method.lower() + re.sub(r"[^0-9A-Za-z]+", "_", openapi_path(path)).rstrip("_")
    op: dict[str, Any] = {"operationId": operation_id, "summary": summary}
    if doc.params:
        op["parameters"] = [p.as_openapi() for p in doc.params]
    errors: dict[int, str] = dict(OPEN_ERRORS if doc.open else COMMON_ERRORS)
    if doc.body is not None:
        op["requestBody"] = {"required": True, "content": _content("application/json", doc.body)}
        errors.update(BODY_ERRORS)
    if any(p.where == "query" for p in doc.params) or any(p.where == "path" for p in doc.params):
        errors.setdefault(400, "A parameter is malformed or out of range")
    errors.update(doc.errors)
    responses: dict[str, Any] = {
        str(doc.status): {"description": "Success", "content": _content(doc.media, doc.response)}
    }
    for status, text in sorted(errors.items()):
        media = doc.error_media if status in doc.errors else "application/json"
        schema = {"$ref": "#/components/schemas/Error"} if media == "application/json" else None
        responses[str(status)] = {"description": text, "content": _content(media, schema)}
    op["responses"] = responses
    op["security"] = [] if doc.open else [{"bearerToken": []}]
    return op


def document(routes: list[tuple[str, str, str, RouteDoc]], version: str) -> dict[str, Any]:
    """The whole OpenAPI 3.1 document for ``(method, path, summary, doc)`` routes."""
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary, doc in routes:
        paths.setdefault(openapi_path(path), {})[method.lower()] = _operation(
            method, path, summary, doc)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "syncnode local API",
            "version": version,
            "description": "The local API of a syncnode node. Every request needs the token from "
                           "the node's data dir (file api_token) as Authorization: Bearer, "
                           "except those marked with no security. Request bodies are "
                           "application/json only; cross-origin browser requests are refused.",
        },
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": {"Error": ERROR_SCHEMA},
            "securitySchemes": {
                "bearerToken": {
                    "type": "http", "scheme": "bearer",
                    "description": "The token in <data_dir>/api_token (created at first start, "
                                   "mode 0600)",
                },
            },
        },
        "security": [{"bearerToken": []}],
    }
