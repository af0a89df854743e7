"""HIP-435 v6 hashes: file hash, metadata hash, item hash and the running hash fold.

The byte layouts are the ones real Hedera nodes use (see ``docs/recordstream.md``); every function
here is pure so that a Spark job can hash items in parallel and fold the running hash in order.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable

from sync.recordstream import record_stream_pb2 as pb

__all__ = [
    "HASH_LEN",
    "RECORD_FILE_VERSION",
    "file_hash",
    "fold_running_hash",
    "hash_object",
    "item_hash",
    "metadata_hash",
    "running_hash",
    "sha384",
]

HASH_LEN = 48
RECORD_FILE_VERSION = 6
# Hedera's serialization headers: RecordStreamObject class id + version 1 for an item, and the
# Hash class id + version 1 around both operands of the running hash.
_ITEM_PREFIX = bytes.fromhex("e370929ba5429d8b00000001")
_HASH_PREFIX = bytes.fromhex("1e7451a283da22f401000000")
_INT32 = struct.Struct(">i")
_METADATA = struct.Struct(">iiii")
_INT64 = struct.Struct(">q")


def sha384(data: bytes) -> bytes:
    return hashlib.sha384(data).digest()


def item_hash(record_bytes: bytes, transaction_bytes: bytes) -> bytes:
    """Hash of one RecordStreamItem; the record comes first, each part length-prefixed."""
    h = hashlib.sha384(_ITEM_PREFIX)
    h.update(_INT32.pack(len(record_bytes)))
    h.update(record_bytes)
    h.update(_INT32.pack(len(transaction_bytes)))
    h.update(transaction_bytes)
    return h.digest()


def fold_running_hash(previous: bytes, item: bytes) -> bytes:
    """One step of the running hash: the previous running hash combined with an item hash."""
    return sha384(_HASH_PREFIX + previous + _HASH_PREFIX + item)


def running_hash(start: bytes, items: Iterable[tuple[bytes, bytes]]) -> bytes:
    """Fold ``(record_bytes, transaction_bytes)`` pairs into the running hash, in order."""
    h = start
    for record_bytes, transaction_bytes in items:
        h = fold_running_hash(h, item_hash(record_bytes, transaction_bytes))
    return h


def file_hash(uncompressed: bytes) -> bytes:
    """Hash of a whole record file: the uncompressed bytes, 4-byte version included."""
    return sha384(uncompressed)


def metadata_hash(hapi: pb.SemanticVersion, start: bytes, end: bytes, block_number: int) -> bytes:
    """The hash a node's metadata signature signs; it survives changes to item encodings."""
    return sha384(
        _METADATA.pack(RECORD_FILE_VERSION, hapi.major, hapi.minor, hapi.patch)
        + start
        + end
        + _INT64.pack(block_number)
    )


def hash_object(digest: bytes) -> pb.HashObject:
    return pb.HashObject(algorithm=pb.SHA_384, length=len(digest), hash=digest)
