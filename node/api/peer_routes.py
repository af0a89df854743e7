"""The API's peer routes: connected and known peers, join (dial and remember), forget."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from node.api.app import ApiError, ApiRoute, read_json
from node.api.openapi import Param, RouteDoc, arr, obj
from node.p2p import P2PError

if TYPE_CHECKING:
    from node.runtime import NodeRuntime

__all__ = ["PEER_ROUTES"]


async def _peers(node: NodeRuntime, _request: Request) -> Response:
    peers = [
        {"peer_id": p.peer_id, "address": p.address, "direction": p.direction,
         "connected_since": p.connected_since, "path": node.require_host().path(p.peer_id)}
        for p in node.require_host().peers()
    ]
    known = sorted(node.peers.known) if node.peers is not None else []
    return JSONResponse({"connected": peers, "known": known})


async def _join(node: NodeRuntime, request: Request) -> Response:
    body = await read_json(request)
    if not isinstance(body, dict) or not isinstance(body.get("multiaddr"), str):
        raise ApiError(400, 'body must be {"multiaddr": "/ip4/.../tcp/.../p2p/<peer id>"}')
    assert node.peers is not None
    try:
        peer_id = await node.peers.join(body["multiaddr"])
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None
    except P2PError as exc:
        raise ApiError(502, f"cannot connect: {exc}") from None
    return JSONResponse({"peer_id": peer_id, "multiaddr": body["multiaddr"]})


async def _forget(node: NodeRuntime, request: Request) -> Response:
    peer_id = str(request.path_params["peer_id"])
    assert node.peers is not None
    if not await node.peers.forget(peer_id):
        raise ApiError(404, f"{peer_id} is not a known peer")
    return JSONResponse({"peer_id": peer_id, "forgotten": True})


PEERS_SCHEMA = obj({
    "connected": arr(obj({"peer_id": {"type": "string"},
                          "address": {"type": ["string", "null"]},
                          "direction": {"type": "string"},
                          "connected_since": {"type": "number"},
                          "path": {"type": "string"}})),
    "known": arr({"type": "string"}),
})

PEER_ROUTES: list[ApiRoute] = [
    ApiRoute("GET", "/v1/peers", "Connected and known peers", _peers,
             RouteDoc(response=PEERS_SCHEMA)),
    ApiRoute("POST", "/v1/peers", "Join: dial a peer at an address, check its peer id and "
             "remember the address", _join, RouteDoc(
        body=obj({"multiaddr": {"type": "string",
                                "description": "/ip4/HOST/tcp/PORT/p2p/PEER_ID"}}),
        response=obj({"peer_id": {"type": "string"}, "multiaddr": {"type": "string"}}),
        errors={502: "The peer could not be reached"})),
    ApiRoute("DELETE", "/v1/peers/{peer_id}", "Forget a known peer: no more redials, its "
             "stored address dropped, disconnected", _forget, RouteDoc(
                 params=(Param("peer_id", "path", {"type": "string", "minLength": 1,
                                                   "maxLength": 128}, "A known peer's id"),),
                 response=obj({"peer_id": {"type": "string"}, "forgotten": {"const": True}}),
                 errors={404: "Not a known peer"})),
]
