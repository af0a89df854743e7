"""Writer: our events -> v6 record files, one per period, chained by the running hash.

Sans-IO: ``RecordStreamWriter.add`` and ``close`` return ``OutputFile``s (relative path + bytes)
for the caller to store. ``assemble_block`` is the pure core, usable on its own by a batch job that
cuts periods itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from sync.errors import LocalProtocolError
from sync.recordstream import record_stream_pb2 as pb
from sync.recordstream.codec import (
    DEFAULT_LIMITS,
    encode_record_file,
    encode_sidecar_file,
    encode_signature_file,
    gzip_deterministic,
    sidecar_type_of,
)
from sync.recordstream.events import (
    ConsensusClock,
    SnapshotEvent,
    delivery_sidecar_record,
    event_item,
)
from sync.recordstream.hashing import (
    HASH_LEN,
    file_hash,
    hash_object,
    metadata_hash,
    running_hash,
    sha384,
)
from sync.recordstream.naming import record_file_name, sidecar_file_name, signature_file_name
from sync.recordstream.signatures import sign_hash

__all__ = [
    "SYNCNODE_FORMAT_VERSION",
    "BlockItem",
    "OutputFile",
    "RecordStreamWriter",
    "WriterConfig",
    "assemble_block",
]

# Goes where Hedera writes its HAPI version; it versions our record and sidecar payloads.
SYNCNODE_FORMAT_VERSION = (0, 1, 0)
_SIDECAR_ID = 1


@dataclass(frozen=True)
class OutputFile:
    path: str
    data: bytes


@dataclass(frozen=True)
class BlockItem:
    """One item of a block: its consensus time, serialized record and transaction, and sidecars."""

    consensus_ns: int
    record: bytes
    transaction: bytes
    sidecars: tuple[pb.TransactionSidecarRecord, ...] = ()


@dataclass(frozen=True)
class WriterConfig:
    node: str
    period_ns: int = 2_000_000_000
    first_block: int = 0
    start_running_hash: bytes = bytes(HASH_LEN)
    delivery_sidecar: bool = False
    version: tuple[int, int, int] = SYNCNODE_FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.period_ns <= 0 or self.first_block < 0:
            raise LocalProtocolError("period_ns must be positive and first_block non-negative")
        if len(self.start_running_hash) != HASH_LEN:
            raise LocalProtocolError("start_running_hash must be 48 bytes")
        if not self.node or "/" in self.node:
            raise LocalProtocolError(f"invalid node name {self.node!r}")


def _signature_file(
    record_hash: bytes,
    meta_hash: bytes,
    ed25519_key: Ed25519PrivateKey | None,
    rsa_key: RSAPrivateKey | None,
) -> pb.SignatureFile | None:
    keys = [key for key in (rsa_key, ed25519_key) if key is not None]
    if not keys:
        return None
    sig = pb.SignatureFile(
        file_signature=sign_hash(keys[0], record_hash),
        metadata_signature=sign_hash(keys[0], meta_hash),
    )
    if len(keys) == 2:
        sig.secondary_file_signature.CopyFrom(sign_hash(keys[1], record_hash))
        sig.secondary_metadata_signature.CopyFrom(sign_hash(keys[1], meta_hash))
    return sig


def assemble_block(
    node: str,
    items: Sequence[BlockItem],
    start_running_hash: bytes,
    block_number: int,
    *,
    version: tuple[int, int, int] = SYNCNODE_FORMAT_VERSION,
    ed25519_key: Ed25519PrivateKey | None = None,
    rsa_key: RSAPrivateKey | None = None,
) -> tuple[list[OutputFile], bytes]:
    """One record file (+ its sidecar and signature file) and the end running hash."""
    if not items:
        raise LocalProtocolError("a record file needs at least one item")
    end = running_hash(start_running_hash, ((i.record, i.transaction) for i in items))
    hapi = pb.SemanticVersion(major=version[0], minor=version[1], patch=version[2])
    name = record_file_name(items[0].consensus_ns)
    directory = f"record{node}"
    message = pb.RecordStreamFile(
        hapi_proto_version=hapi,
        start_object_running_hash=hash_object(start_running_hash),
        record_stream_items=[
            pb.RecordStreamItem(transaction=i.transaction, record=i.record) for i in items
        ],
        end_object_running_hash=hash_object(end),
        block_number=block_number,
    )
    outputs: list[OutputFile] = []
    sidecar_records = [record for item in items for record in item.sidecars]
    if sidecar_records:
        side_raw = encode_sidecar_file(pb.SidecarFile(sidecar_records=sidecar_records))
        message.sidecars.append(
            pb.SidecarMetadata(
                hash=hash_object(sha384(side_raw)),
                id=_SIDECAR_ID,
                types=sorted(
                    {kind for r in sidecar_records if (kind := sidecar_type_of(r)) is not None}
                ),
            )
        )
        outputs.append(
            OutputFile(
                f"{directory}/sidecar/{sidecar_file_name(name, _SIDECAR_ID)}",
                gzip_deterministic(side_raw),
            )
        )
    raw = encode_record_file(message)
    if len(raw) > DEFAULT_LIMITS.max_uncompressed:
        # Never write what our own reader refuses: use a shorter period instead.
        raise LocalProtocolError(f"record file of {len(raw)} bytes exceeds the reader limit")
    outputs.insert(0, OutputFile(f"{directory}/{name}", gzip_deterministic(raw)))
    sig = _signature_file(
        file_hash(raw),
        metadata_hash(hapi, start_running_hash, end, block_number),
        ed25519_key,
        rsa_key,
    )
    if sig is not None:
        outputs.append(
            OutputFile(f"{directory}/{signature_file_name(name)}", encode_signature_file(sig))
        )
    return outputs, end


class RecordStreamWriter:
    """Cuts events into periods and emits each finished block's files.

    Feed events in (lamport, message_id) order with ``add``; a block is emitted when the first
    event of a later period arrives, and the last one by ``close``. The running hash and block
    number carry over from block to block (and from ``config`` for the first).
    """

    def __init__(
        self,
        config: WriterConfig,
        *,
        ed25519_key: Ed25519PrivateKey | None = None,
        rsa_key: RSAPrivateKey | None = None,
    ) -> None:
        self.config = config
        self._ed25519_key = ed25519_key
        self._rsa_key = rsa_key
        self.running_hash = config.start_running_hash
        self.next_block = config.first_block
        self._pending: list[BlockItem] = []
        self._period: int | None = None
        self._clock = ConsensusClock()
        self._closed = False

    def add(self, event: SnapshotEvent) -> list[OutputFile]:
        if self._closed:
            raise LocalProtocolError("writer already closed")
        consensus = self._clock.stamp(event)
        record, transaction = event_item(event, consensus)
        sidecars = (
            (delivery_sidecar_record(event, consensus),) if self.config.delivery_sidecar else ()
        )
        period = consensus // self.config.period_ns
        out = self._flush() if self._period is not None and period != self._period else []
        self._period = period
        self._pending.append(BlockItem(consensus, record, transaction, sidecars))
        return out

    def close(self) -> list[OutputFile]:
        """Emit the last (partial) block; the writer accepts no more events."""
        self._closed = True
        return self._flush()

    def _flush(self) -> list[OutputFile]:
        if not self._pending:
            return []
        outputs, self.running_hash = assemble_block(
            self.config.node,
            self._pending,
            self.running_hash,
            self.next_block,
            version=self.config.version,
            ed25519_key=self._ed25519_key,
            rsa_key=self._rsa_key,
        )
        self.next_block += 1
        self._pending = []
        return outputs
