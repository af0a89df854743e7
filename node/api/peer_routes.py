"""The API's peer routes: connected and known peers, join (dial and remember), forget."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from node.httpkit import ApiError, ApiRoute, read_json
from node.httpkit.openapi import Param, RouteDoc, arr, obj
from node.p2p import P2PError
from node.replication.peer_activity import path_of

if TYPE_CHECKING:
    from node.p2p import P2PHost
    from node.replication.membership import Membership
    from node.replication.peers import PeerManager
    from node.replication.recon import ReconService

__all__ = ["PEER_ROUTES", "PeersNode"]


class PeersNode(Protocol):
    """What the peer routes read of the node (``node.runtime.NodeRuntime``)."""

    @property
    def peers(self) -> PeerManager | None: ...

    @property
    def membership(self) -> Membership | None: ...

    @property
    def recon(self) -> ReconService | None: ...

    def require_host(self) -> P2PHost: ...



def _activity(node: PeersNode, peer: str, connected: bool) -> dict[str, Any]:
    if node.recon is None:
        return {"last_seen": None, "last_recon": None}
    return node.recon.activity.describe(peer, connected)


async def _peers(node: PeersNode, _request: Request) -> Response:
    synced = node.recon.sync.peers() if node.recon is not None else {}
    peers = [
        {"peer_id": p.peer_id, "address": p.address, "direction": p.direction,
         "connected_since": p.connected_since,
         "path": node.require_host().path(p.peer_id) or path_of(p.address),
         "rtt_ms": round(p.latency_s * 1000, 3) if p.latency_s is not None else None,
         **_activity(node, p.peer_id, True), "sync": synced.get(p.peer_id)}
        for p in node.require_host().peers()
    ]
    known = sorted(node.peers.known) if node.peers is not None else []
    book = len(node.membership.book) if node.membership is not None else 0
    return JSONResponse({"connected": peers, "known": known, "address_book": book})


async def _book(node: PeersNode, _request: Request) -> Response:
    if node.membership is None:
        raise ApiError(503, "the node is starting")
    entries = [
        {"peer_id": e.peer_id, "addrs": list(e.addrs), "source": e.source or None,
         "tried": e.tried, "last_seen": e.last_seen or None, "failures": e.failures,
         "bucket": e.bucket}
        for e in sorted(node.membership.book.entries.values(), key=lambda e: e.peer_id)
    ]
    return JSONResponse({"size": len(entries), "capacity": node.membership.book.limits.capacity,
                         "entries": entries})


async def _join(node: PeersNode, request: Request) -> Response:
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


async def _forget(node: PeersNode, request: Request) -> Response:
    peer_id = str(request.path_params["peer_id"])
    assert node.peers is not None
    if not await node.peers.forget(peer_id):
        raise ApiError(404, f"{peer_id} is not a known peer")
    return JSONResponse({"peer_id": peer_id, "forgotten": True})


_LAST_RECON = {"type": ["object", "null"], "description": "The last Recon session: at (Unix "
               "time), role, outcome (ok or the error), events fetched and served"}
_PEER_SYNC = {"type": ["object", "null"], "description": "How far behind this peer the node "
              "is: behind (events it holds that we lack, estimated now), measured (what the "
              "last Recon round found), reconciled_ago_s, partial; null: no Recon round with "
              "it yet"}
PEERS_SCHEMA = obj({
    "connected": arr(obj({"peer_id": {"type": "string"},
                          "address": {"type": ["string", "null"]},
                          "direction": {"type": "string"},
                          "connected_since": {"type": "number"},
                          "path": {"enum": ["direct", "relayed"]},
                          "rtt_ms": {"type": ["number", "null"]},
                          "last_seen": {"type": ["number", "null"]},
                          "last_recon": _LAST_RECON,
                          "sync": _PEER_SYNC})),
    "known": arr({"type": "string"}),
    "address_book": {"type": "integer"},
})

PEER_ROUTES: list[ApiRoute] = [
    ApiRoute("GET", "/v1/peers", "Connected and known peers", _peers,
             RouteDoc(response=PEERS_SCHEMA)),
    ApiRoute("GET", "/v1/peers/book", "The address book: peers this node could dial, where it "
             "learnt each, and whether it ever reached it", _book, RouteDoc(
                 response=obj({"size": {"type": "integer"}, "capacity": {"type": "integer"},
                               "entries": arr(obj({
                                   "peer_id": {"type": "string"},
                                   "addrs": arr({"type": "string"}),
                                   "source": {"type": ["string", "null"]},
                                   "tried": {"type": "boolean"},
                                   "last_seen": {"type": ["number", "null"]},
                                   "failures": {"type": "integer"},
                                   "bucket": {"type": "string"}}))}),
                 errors={503: "The node is starting"})),
    ApiRoute("POST", "/v1/peers", "Join: dial a peer at an address, check its peer id and "
             "remember the address", _join, RouteDoc(
        body=obj({"multiaddr": {"type": "string",
                                "description": "/ip4/HOST/tcp/PORT/p2p/PEER_ID"}}),
        response=obj({"peer_id": {"type": "string"}, "multiaddr": {"type": "string"}}),
        errors={502: "The peer could not be reached"})),
    ApiRoute("DELETE", "/v1/peers/{peer_id}", "Forget a known peer: no more redials, its "
             "stored address dropped, disconnected (also by a dial in flight to it), its "
             "records from peer exchange refused until it is joined again",
             _forget, RouteDoc(
                 params=(Param("peer_id", "path", {"type": "string", "minLength": 1,
                                                   "maxLength": 128}, "A known peer's id"),),
                 response=obj({"peer_id": {"type": "string"}, "forgotten": {"const": True}}),
                 errors={404: "Not a known peer"})),
]
