"""Message validation of py-libp2p 0.8.1's ``Pubsub``, per message in O(1) and one signature
check (entries V1, V2 of the table in ``node.p2p.compat``).

V1, the validation cache. ``ValidationCache.put`` keeps its LRU order in a list: each put
scans it (``in``, ``remove``) and evicts with ``pop(0)``, ~50 µs per message once the cache
holds its 1,000 entries, on every message received or published. :class:`BoundedValidationCache`
keeps the same entries, bound and TTL in one ``OrderedDict``: put, get and eviction in O(1).
Set per ``GuardedPubsub`` (its ``validation_cache``), never on libp2p's class.

V2, the signature check. ``Pubsub.push_msg`` verifies every message with strict signing,
including the ones this host has just signed in ``publish`` (an Ed25519 check, ~70-80 µs,
on our own bytes), and ``signature_validator`` rebuilds the sender's ``ID``, extracts its key
(a multihash decode) and hashes it back per message. :func:`verify_signature` skips exactly
the message object ``GuardedPubsub.push_msg`` marked as being published by this host
(:func:`publishing`), and keeps each sender's key, checked once against its id, in a
bounded table; every other message is verified as before, over the same signed bytes.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections import OrderedDict
from collections.abc import Iterator

import libp2p.pubsub.pubsub as _pubsub_module
from libp2p.crypto.keys import PublicKey
from libp2p.crypto.serialization import deserialize_public_key
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import ValidationCache, ValidationResult
from libp2p.pubsub.validators import PUBSUB_SIGNING_PREFIX

from node.p2p.compat.version import require

__all__ = ["BoundedValidationCache", "patch_signature_check", "publishing", "verify_signature"]

#: Senders whose checked public key is kept (a bound: sender ids come from the network).
MAX_KEYS = 4096
_PREFIX = PUBSUB_SIGNING_PREFIX.encode()

# The message this task is publishing (set by GuardedPubsub.push_msg for its own publishes).
_own_message: contextvars.ContextVar[rpc_pb2.Message | None] = contextvars.ContextVar(
    "libp2p_own_message", default=None)
# sender id bytes -> its public key, checked to hash to that id.
_keys: dict[bytes, PublicKey] = {}


class BoundedValidationCache(ValidationCache):
    """``ValidationCache`` with its LRU order in an ``OrderedDict``: every operation O(1)."""

    def __init__(self, ttl: int = 300, max_size: int = 1000) -> None:
        super().__init__(ttl, max_size)
        self.cache: OrderedDict[bytes, ValidationResult] = OrderedDict()

    def get(self, msg_id: bytes) -> ValidationResult | None:
        result = self.cache.get(msg_id)
        if result is None:
            return None
        # libp2p stamps its results with time.time(): their age is read on the same clock.
        if time.time() - result.timestamp > self.ttl:
            del self.cache[msg_id]
            return None
        self.cache.move_to_end(msg_id)
        return result

    def put(self, msg_id: bytes, result: ValidationResult) -> None:
        self.cache[msg_id] = result
        self.cache.move_to_end(msg_id)
        while len(self.cache) > self.max_size:
            self.cache.popitem(last=False)

    def _remove(self, msg_id: bytes) -> None:
        self.cache.pop(msg_id, None)

    def clear_expired(self) -> None:
        oldest_kept = time.time() - self.ttl  # libp2p's stamps: time.time() (see get)
        for msg_id in [m for m, r in self.cache.items() if r.timestamp < oldest_kept]:
            del self.cache[msg_id]


@contextlib.contextmanager
def publishing(msg: rpc_pb2.Message) -> Iterator[None]:
    """While inside, :func:`verify_signature` takes ``msg`` (this very object, signed by this
    host a moment ago) as valid. Context variables are per task: no other task sees it."""
    token = _own_message.set(msg)
    try:
        yield
    finally:
        _own_message.reset(token)


def _sender_key(msg: rpc_pb2.Message) -> PublicKey | None:
    """The key the sender id names (inline in Ed25519 ids, else ``msg.key`` hashing to it)."""
    from_id = bytes(msg.from_id)
    key = _keys.get(from_id)
    if key is not None:
        return key
    sender = ID(from_id)
    try:
        key = sender.extract_public_key()
        if key is None:
            key = deserialize_public_key(msg.key) if msg.key else None
    except Exception:
        return None
    if key is None or ID.from_pubkey(key) != sender:
        return None
    if len(_keys) >= MAX_KEYS:
        _keys.clear()
    _keys[from_id] = key
    return key


def verify_signature(msg: rpc_pb2.Message) -> bool:
    """``signature_validator`` of 0.8.1: the same check, without our own publishes and
    with each sender's key derived once."""
    if msg is _own_message.get():
        return True
    if not msg.signature:
        return False
    key = _sender_key(msg)
    if key is None:
        return False
    signed = rpc_pb2.Message(data=msg.data, topicIDs=msg.topicIDs, from_id=msg.from_id,
                             seqno=msg.seqno)
    try:
        return bool(key.verify(_PREFIX + signed.SerializeToString(), msg.signature))
    except Exception:
        return False


def patch_signature_check() -> None:
    # ``push_msg`` looks the name up in the pubsub module at call time.
    require(_pubsub_module, "signature_validator")
    setattr(_pubsub_module, "signature_validator", verify_signature)  # noqa: B010
