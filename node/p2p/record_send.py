"""py-libp2p 0.8.1 attaches the host's signed peer record to every pubsub RPC it sends, and
builds it on each send (``env_to_send_in_RPC``: the host's addresses as a set, compared with the
cached record's, then the envelope marshalled again): 2.7% of a busy node's samples (issue 31,
docs/bench/cluster.md). The bytes change only when the host's addresses do, so they are kept
per host for ``REFRESH_S`` of the host's clock (:func:`use_clock`: the node's one clock; a host
given none is not cached): a new address reaches peers' records at most that much later (the
record is advisory there: certified addresses for dialling, never a check on our messages).

Under the same version check as ``node.p2p.patches`` (the patched names are module globals
that the pubsub modules look up at call time).
"""

from __future__ import annotations

import weakref
from typing import Any

import libp2p.pubsub.gossipsub as _gossipsub_module
import libp2p.pubsub.pubsub as _pubsub_module
from libp2p.abc import IHost
from libp2p.peer.peerstore import env_to_send_in_RPC as _original_env_to_send

from node.clock import Clock
from node.p2p.frames import P2PError
from node.p2p.patches import check_libp2p_version

__all__ = ["REFRESH_S", "patch_record_sending", "use_clock"]

#: How long the marshalled record of a host is reused.
REFRESH_S = 1.0

_sent: weakref.WeakKeyDictionary[Any, tuple[float, bytes]] = weakref.WeakKeyDictionary()
_clocks: weakref.WeakKeyDictionary[Any, Clock] = weakref.WeakKeyDictionary()


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


def patch_record_sending() -> None:
    check_libp2p_version()
    for module in (_pubsub_module, _gossipsub_module):
        if not hasattr(module, "env_to_send_in_RPC"):
            raise P2PError(f"{module.__name__}.env_to_send_in_RPC is gone")
        setattr(module, "env_to_send_in_RPC", _env_to_send_cached)  # noqa: B010
