"""The signed peer record py-libp2p 0.8.1 attaches to every pubsub RPC (entries R1, R2 of the
table in ``node.p2p.compat``), handled per host.

R1, receiving: libp2p verifies the sender's record on every RPC (7-10% of a busy node's CPU);
the same bytes from the same peer were verified already. Kept per receiving host, so each
host's peerstore still gets every peer's record once.

R2, sending: libp2p builds the host's record on each send (``env_to_send_in_RPC``: the
host's addresses as a set, compared with the cached record's, then the envelope marshalled
again): 2.7% of a busy node's samples (issue 31, docs/bench/cluster.md). The bytes change only
when the host's addresses do, so they are kept per host for ``REFRESH_S`` of the host's clock
(:func:`use_clock`: the node's one clock; a host given none is not cached): a new address
reaches peers' records at most that much later (the record is advisory there: certified
addresses for dialling, never a check on our messages).

R3, sending again: libp2p attaches the record to every RPC (each publish, forward and control
message), a few hundred bytes encrypted, sent and compared on the other side per RPC for
bytes that peer already holds. ``GuardedPubsub.write_msg`` calls :func:`drop_repeated_record`:
the record goes on a stream's first RPC (the hello) and again only when it changed.

The patched names are module globals that the pubsub modules look up at call time.
"""

from __future__ import annotations

import weakref
from typing import Any

import libp2p.pubsub.gossipsub as _gossipsub_module
import libp2p.pubsub.pubsub as _pubsub_module
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.peer.peerstore import env_to_send_in_RPC as _original_env_to_send
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.utils import maybe_consume_signed_record as _original_consume_record

from node.clock import Clock
from node.p2p.compat.version import require

__all__ = ["REFRESH_S", "drop_repeated_record", "patch_record_sending",
           "patch_record_verification", "use_clock"]

#: How long the marshalled record of a host is reused.
REFRESH_S = 1.0
#: Peers whose accepted record a host remembers (a bound: peer ids come from the network).
MAX_REMEMBERED = 4096

_sent: weakref.WeakKeyDictionary[Any, tuple[float, bytes]] = weakref.WeakKeyDictionary()
_clocks: weakref.WeakKeyDictionary[Any, Clock] = weakref.WeakKeyDictionary()
# receiving host -> peer id -> the signed record bytes it last sent and that host accepted.
_accepted: weakref.WeakKeyDictionary[Any, dict[ID, bytes]] = weakref.WeakKeyDictionary()


def use_clock(host: IHost, clock: Clock) -> None:
    """Cache ``host``'s record on ``clock`` (the patched function is global, the clock per host)."""
    _clocks[host] = clock


def _env_to_send_cached(host: IHost) -> tuple[bytes, bool]:
    """``env_to_send_in_RPC`` with the host's last answer reused for ``REFRESH_S``."""
    clock = _clocks.get(host)
    if clock is None:
        return _original_env_to_send(host)
    now = clock.now()
    kept = _sent.get(host)
    if kept is not None and now < kept[0]:
        return kept[1], False
    envelope, created = _original_env_to_send(host)
    _sent[host] = (now + REFRESH_S, envelope)
    return envelope, created


def _consume_record_once(msg: Any, host: IHost, peer_id: ID) -> bool:
    """``maybe_consume_signed_record``, skipped when ``host`` accepted these bytes already."""
    if not msg.HasField("senderRecord"):
        return True
    record = bytes(msg.senderRecord)
    accepted_here = _accepted.get(host)
    if accepted_here is not None and accepted_here.get(peer_id) == record:
        return True
    accepted = bool(_original_consume_record(msg, host, peer_id))
    if accepted:
        if accepted_here is None:
            accepted_here = _accepted[host] = {}
        if len(accepted_here) >= MAX_REMEMBERED:
            accepted_here.clear()
        accepted_here[peer_id] = record
    return accepted


def patch_record_sending() -> None:
    for module in (_pubsub_module, _gossipsub_module):
        require(module, "env_to_send_in_RPC")
        setattr(module, "env_to_send_in_RPC", _env_to_send_cached)  # noqa: B010


def patch_record_verification() -> None:
    for module in (_pubsub_module, _gossipsub_module):
        require(module, "maybe_consume_signed_record")
        setattr(module, "maybe_consume_signed_record", _consume_record_once)  # noqa: B010


def drop_repeated_record(sent: weakref.WeakKeyDictionary[Any, bytes], stream: Any,
                         rpc: rpc_pb2.RPC) -> None:
    """Clear ``rpc``'s sender record when ``stream`` carried the same bytes already
    (``sent``: stream -> the record last written on it; the caller holds the stream's write
    lock, so records go out in this order)."""
    if not rpc.HasField("senderRecord"):
        return
    record = rpc.senderRecord
    if sent.get(stream) == record:
        rpc.ClearField("senderRecord")
    else:
        sent[stream] = record
