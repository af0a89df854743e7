"""Moved to ``node.httpkit.openapi`` (the toolkit imports nothing of ``node``); kept so that
``node.api.openapi`` imports still resolve."""

from __future__ import annotations

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

__all__ = ["ERROR_SCHEMA", "INT64_MAX", "Param", "RouteDoc", "arr", "document", "obj",
           "openapi_path"]
