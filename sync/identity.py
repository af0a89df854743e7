"""libp2p peer ids for Ed25519 keys, computed without libp2p.

A libp2p peer id of an Ed25519 key is the identity multihash of the protobuf-encoded public key,
written in base58btc. Because the public key is *inside* the id, any node can verify an event's
signature from its ``sender_id`` alone, with no key exchange.
"""

from __future__ import annotations

from functools import lru_cache

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError

from sync.errors import RemoteProtocolError

__all__ = [
    "b58decode",
    "b58encode",
    "peer_id_of",
    "public_key_from_peer_id",
    "sign",
    "verify",
]

_ALPHABET = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}
# protobuf PublicKey{Type=Ed25519(1), Data=<32 bytes>} wrapped in an identity multihash (0x00, len).
_ED25519_PREFIX = bytes([0x00, 0x24, 0x08, 0x01, 0x12, 0x20])
_MAX_PEER_ID_LEN = 128


def b58encode(data: bytes) -> str:
    n = int.from_bytes(data, "big")
    out = bytearray()
    while n:
        n, r = divmod(n, 58)
        out.append(_ALPHABET[r])
    pad = len(data) - len(data.lstrip(b"\0"))
    return (b"1" * pad + bytes(reversed(out))).decode("ascii")


def b58decode(text: str) -> bytes:
    raw = text.encode("ascii", errors="replace")
    n = 0
    for c in raw:
        digit = _INDEX.get(c)
        if digit is None:
            raise RemoteProtocolError("invalid base58 character")
        n = n * 58 + digit
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    pad = len(raw) - len(raw.lstrip(b"1"))
    return b"\0" * pad + body


def _raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def peer_id_of(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """The libp2p peer id (``12D3KooW...``) of an Ed25519 key."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return b58encode(_ED25519_PREFIX + _raw_public(public))


def _raw_key_from_peer_id(peer_id: str) -> bytes:
    if not peer_id or len(peer_id) > _MAX_PEER_ID_LEN:
        raise RemoteProtocolError("peer id missing or too long")
    raw = b58decode(peer_id)
    if len(raw) != len(_ED25519_PREFIX) + 32 or not raw.startswith(_ED25519_PREFIX):
        raise RemoteProtocolError("peer id is not an Ed25519 identity id")
    return raw[len(_ED25519_PREFIX) :]


@lru_cache(maxsize=4096)
def _cached_raw_key(peer_id: str) -> bytes | None:
    # A group has few senders: decoding each one's id once saves ~20 us per verification.
    try:
        return _raw_key_from_peer_id(peer_id)
    except RemoteProtocolError:
        return None


def public_key_from_peer_id(peer_id: str) -> Ed25519PublicKey:
    """Extract the Ed25519 public key embedded in a peer id; ``RemoteProtocolError`` if none."""
    return Ed25519PublicKey.from_public_bytes(_raw_key_from_peer_id(peer_id))


def sign(key: Ed25519PrivateKey, data: bytes) -> bytes:
    return key.sign(data)


def verify(peer_id: str, signature: bytes, data: bytes) -> bool:
    """True when ``signature`` over ``data`` was made by the key inside ``peer_id``.

    Verification uses libsodium (PyNaCl): about twice as fast as OpenSSL's Ed25519 here, and
    the call releases the GIL, so worker threads can verify on several cores.
    """
    raw = _cached_raw_key(peer_id) if len(peer_id) <= _MAX_PEER_ID_LEN else None
    if raw is None or len(signature) != 64:
        return False
    try:
        crypto_sign_open(signature + data, raw)
    except (BadSignatureError, ValueError):
        return False
    return True
