"""Signature objects of v6 signature files: SHA384withRSA (Hedera) and Ed25519 (ours).

Both sign the 48-byte hash itself. SHA384withRSA is RSA PKCS#1 v1.5 with SHA-384 over that hash,
as Hedera nodes produce; Ed25519 signs the same 48 bytes with the node's libp2p identity key.
``checksum`` is Hedera's ``101 - length``.
"""

from __future__ import annotations

from collections.abc import Sequence

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey, RSAPublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from sync.errors import RemoteProtocolError
from sync.recordstream import record_stream_pb2 as pb
from sync.recordstream.hashing import hash_object

__all__ = [
    "SIGNATURE_FIELDS",
    "PrivateKey",
    "PublicKey",
    "key_fits",
    "load_public_keys_pem",
    "sign_hash",
    "signature_checksum",
    "signature_object_problem",
    "verify_signature_object",
]

PublicKey = RSAPublicKey | Ed25519PublicKey
PrivateKey = RSAPrivateKey | Ed25519PrivateKey
# Each SignatureFile field with the hash it signs; the secondary pair is ours (see the .proto).
SIGNATURE_FIELDS: tuple[tuple[str, str], ...] = (
    ("file_signature", "file"),
    ("metadata_signature", "metadata"),
    ("secondary_file_signature", "file"),
    ("secondary_metadata_signature", "metadata"),
)
_PEM_BEGIN = b"-----BEGIN PUBLIC KEY-----"
_PEM_END = b"-----END PUBLIC KEY-----"
_MAX_KEYS_PER_FILE = 8


def signature_checksum(length: int) -> int:
    return 101 - length


def load_public_keys_pem(data: bytes, name: str) -> list[PublicKey]:
    """Every RSA or Ed25519 ``PUBLIC KEY`` block in a PEM file, in order."""
    keys: list[PublicKey] = []
    start = data.find(_PEM_BEGIN)
    while start != -1:
        end = data.find(_PEM_END, start)
        if end == -1 or len(keys) >= _MAX_KEYS_PER_FILE:
            raise RemoteProtocolError("PEM block unterminated or too many keys", name)
        block = data[start : end + len(_PEM_END)]
        try:
            key = load_pem_public_key(block)
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise RemoteProtocolError(f"PEM key unreadable: {exc}", name) from None
        if not isinstance(key, RSAPublicKey | Ed25519PublicKey):
            raise RemoteProtocolError(f"unsupported key type {type(key).__name__}", name)
        keys.append(key)
        start = data.find(_PEM_BEGIN, end)
    if not keys:
        raise RemoteProtocolError("no PUBLIC KEY block", name)
    return keys


def sign_hash(key: PrivateKey, digest: bytes) -> pb.SignatureObject:
    """A SignatureObject over ``digest`` (a 48-byte SHA-384 hash)."""
    if isinstance(key, RSAPrivateKey):
        signature = key.sign(digest, padding.PKCS1v15(), hashes.SHA384())
        kind = pb.SHA_384_WITH_RSA
    else:
        signature = key.sign(digest)
        kind = pb.ED25519
    return pb.SignatureObject(
        type=kind,
        length=len(signature),
        checksum=signature_checksum(len(signature)),
        signature=signature,
        hash_object=hash_object(digest),
    )


def _verify_with(key: PublicKey, kind: int, signature: bytes, digest: bytes) -> bool:
    try:
        if kind == pb.SHA_384_WITH_RSA and isinstance(key, RSAPublicKey):
            key.verify(signature, digest, padding.PKCS1v15(), hashes.SHA384())
            return True
        if kind == pb.ED25519 and isinstance(key, Ed25519PublicKey):
            key.verify(signature, digest)
            return True
    except (InvalidSignature, ValueError):
        return False
    return False


def signature_object_problem(obj: pb.SignatureObject, expected_hash: bytes) -> str | None:
    """What is wrong with ``obj`` short of the cryptography: type, length, checksum, hash."""
    if obj.type not in (pb.SHA_384_WITH_RSA, pb.ED25519):
        return f"unknown signature type {obj.type}"
    if obj.length != len(obj.signature) or obj.checksum != signature_checksum(obj.length):
        return (
            f"length/checksum inconsistent (length {obj.length}, checksum {obj.checksum}, "
            f"{len(obj.signature)} signature bytes)"
        )
    if obj.hash_object.hash != expected_hash:
        return "signed hash differs from the recomputed hash"
    return None


def key_fits(key: PublicKey, kind: int) -> bool:
    """Whether ``key`` can check a signature of SignatureType ``kind``."""
    if kind == pb.SHA_384_WITH_RSA:
        return isinstance(key, RSAPublicKey)
    return kind == pb.ED25519 and isinstance(key, Ed25519PublicKey)


def verify_signature_object(
    obj: pb.SignatureObject, expected_hash: bytes, keys: Sequence[PublicKey]
) -> str | None:
    """None when ``obj`` validly signs ``expected_hash`` with one of ``keys``, else why not."""
    problem = signature_object_problem(obj, expected_hash)
    if problem is not None:
        return problem
    usable = [key for key in keys if key_fits(key, obj.type)]
    if not usable:
        return f"no {pb.SignatureType.Name(obj.type)} key for this node"
    if any(_verify_with(key, obj.type, obj.signature, expected_hash) for key in usable):
        return None
    return "signature does not verify"
