"""CRDT messages and their canonical encoding.

A message is the content of one event on a CRDT channel. Only the operation, table, entity id
and values are encoded; the timestamp (the event's Lamport timestamp) and the sender (the
event's peer id) come from the carrying event, so they cannot disagree with it.

Encoding: UTF-8 compact JSON with sorted keys, non-ASCII characters kept as UTF-8, e.g.
``{"crdt":1,"id":"a1","op":"upsert","table":"artists","values":{"name":"Ana","plays":3}}``.
The decoder re-encodes what it parsed and rejects any input that differs, so one message has
exactly one byte string (no whitespace, key-order, escaping or number-spelling variants).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from types import MappingProxyType
from typing import Any

from sync.crdt.values import Value, is_identifier, is_unicode, value_problem
from sync.errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "ENCODING_VERSION",
    "MAX_ENTITY_ID_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_TIMESTAMP",
    "RESERVED_COLUMN",
    "CrdtMessage",
    "Operation",
    "check_event_stamp",
    "decode_message",
    "encode_message",
    "message_of_document",
    "parse_document",
]

ENCODING_VERSION = 1
MAX_MESSAGE_BYTES = 64 * 1024
MAX_ENTITY_ID_BYTES = 512
MAX_TIMESTAMP = 2**64 - 1
# The entity id is the row key in storage/, so no message may write a column of that name.
RESERVED_COLUMN = "id"

_KEYS = frozenset({"crdt", "id", "op", "table", "values"})
# One encoder for every canonical encoding: json.dumps with options builds a new one per call,
# and messages are encoded once each on the hot path (the decoder's canonical check).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False)


class Operation(StrEnum):
    UPSERT = "upsert"
    UPDATE = "update"
    DELETE = "delete"


def _content_problem(
    operation: object, table: object, entity_id: object, values: object
) -> str | None:
    """Why this content is not a well-formed message, or None. Schemas are not consulted."""
    if not isinstance(operation, Operation):
        return "unknown operation"
    if not is_identifier(table):
        return "table name is not an identifier"
    if not isinstance(entity_id, str) or not entity_id:
        return "entity id must be a non-empty string"
    if not is_unicode(entity_id) or len(entity_id.encode("utf-8")) > MAX_ENTITY_ID_BYTES:
        return f"entity id must be valid Unicode of at most {MAX_ENTITY_ID_BYTES} bytes"
    if not isinstance(values, Mapping):
        return "values must be a mapping"
    for column, value in values.items():
        if not is_identifier(column):
            return "column name is not an identifier"
        problem = value_problem(value)
        if problem is not None:
            return f"column {column}: {problem}"
    if operation is Operation.DELETE and values:
        return "delete carries no values"
    if operation is Operation.UPDATE and not values:
        return "update without values"
    return None


@dataclass(frozen=True, eq=False)
class CrdtMessage:
    """One CRDT mutation. Equality and hash are over (timestamp, sender, canonical bytes).

    Construction checks the shape (operation, identifiers, value types, size) and raises
    ``LocalProtocolError``; schemas are checked later, by ``validate_message``.
    """

    operation: Operation
    table: str
    entity_id: str
    values: Mapping[str, Value] = field(default_factory=dict)
    timestamp: int = 0
    sender: str = ""

    def __post_init__(self) -> None:
        problem = _content_problem(self.operation, self.table, self.entity_id, self.values)
        if problem is not None:
            raise LocalProtocolError(problem)
        if (
            not isinstance(self.timestamp, int)
            or isinstance(self.timestamp, bool)
            or not 0 <= self.timestamp <= MAX_TIMESTAMP
        ):
            raise LocalProtocolError("timestamp must be an unsigned 64-bit integer")
        if not isinstance(self.sender, str) or not self.sender:
            raise LocalProtocolError("sender must be a non-empty peer id")
        # A private sorted copy: the caller's dict may change later, the message must not.
        frozen = MappingProxyType(dict(sorted(self.values.items())))
        object.__setattr__(self, "values", frozen)
        if len(self.encoded) > MAX_MESSAGE_BYTES:
            raise LocalProtocolError(f"encoded message exceeds {MAX_MESSAGE_BYTES} bytes")

    @classmethod
    def _checked(
        cls, operation: Operation, table: str, entity_id: str, values: Mapping[str, Value],
        timestamp: int, sender: str,
    ) -> CrdtMessage:
        """A message whose content the decoder already checked (``_content_problem``): skips
        checking it a second time, which was the decoder's largest cost."""
        msg = object.__new__(cls)
        for name, value in (("operation", operation), ("table", table),
                            ("entity_id", entity_id), ("timestamp", timestamp),
                            ("sender", sender)):
            object.__setattr__(msg, name, value)
        object.__setattr__(msg, "values", MappingProxyType(dict(sorted(values.items()))))
        return msg

    @cached_property
    def encoded(self) -> bytes:
        """The canonical encoding of the content (see the module docstring)."""
        doc = {
            "crdt": ENCODING_VERSION,
            "id": self.entity_id,
            "op": self.operation.value,
            "table": self.table,
            "values": dict(self.values),
        }
        text = _CANONICAL.encode(doc)
        return text.encode("utf-8")

    @property
    def identity(self) -> tuple[int, str, bytes]:
        """What makes two messages the same message; also their canonical sort key."""
        return (self.timestamp, self.sender, self.encoded)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CrdtMessage):
            return NotImplemented
        return self.identity == other.identity

    def __hash__(self) -> int:
        return hash(self.identity)


def encode_message(message: CrdtMessage) -> bytes:
    """Canonical bytes of ``message``'s content (timestamp and sender are not included)."""
    return message.encoded


def _no_constants(name: str) -> Any:
    raise ValueError(f"JSON constant {name} is not allowed")


def parse_document(data: bytes, *, sender: str, max_size: int = MAX_MESSAGE_BYTES) -> Any:
    """The JSON document of CRDT content (a message or a schema declaration), size-checked.

    Malformed input raises ``RemoteProtocolError`` (with ``peer=sender``)."""
    limit = min(max_size, MAX_MESSAGE_BYTES)
    if len(data) > limit:
        raise RemoteProtocolError(f"crdt message of {len(data)} bytes exceeds {limit}", sender)
    try:
        doc = json.loads(bytes(data).decode("utf-8"), parse_constant=_no_constants)
    except (ValueError, RecursionError):
        # ValueError covers bad UTF-8, bad JSON and over-long integers.
        raise RemoteProtocolError("crdt message is not valid JSON", sender) from None
    version = doc.get("crdt") if isinstance(doc, dict) else None
    if type(version) is not int or version != ENCODING_VERSION:
        raise RemoteProtocolError(f"unsupported crdt encoding version {version!r}", sender)
    return doc


def check_event_stamp(timestamp: int, sender: str) -> None:
    if isinstance(timestamp, bool) or not 0 <= timestamp <= MAX_TIMESTAMP or not sender:
        raise RemoteProtocolError("event timestamp or sender out of range", sender)


def message_of_document(doc: dict[str, Any], raw: bytes, *, timestamp: int,
                        sender: str) -> CrdtMessage:
    """The message a parsed document (``parse_document``) holds; ``raw`` must be canonical."""
    if doc.keys() != _KEYS:
        keys = ", ".join(sorted(_KEYS))
        raise RemoteProtocolError(f"crdt message must be an object with keys {keys}", sender)
    try:
        operation = Operation(doc["op"])
    except (ValueError, TypeError):
        raise RemoteProtocolError("unknown crdt operation", sender) from None
    problem = _content_problem(operation, doc["table"], doc["id"], doc["values"])
    if problem is not None:
        raise RemoteProtocolError(problem, sender)
    check_event_stamp(timestamp, sender)
    message = CrdtMessage._checked(
        operation, doc["table"], doc["id"], doc["values"], timestamp, sender
    )
    if message.encoded != raw:
        raise RemoteProtocolError("crdt message is not in canonical encoding", sender)
    return message


def decode_message(
    data: bytes, *, timestamp: int, sender: str, max_size: int = MAX_MESSAGE_BYTES
) -> CrdtMessage:
    """Parse canonical message bytes; ``timestamp`` and ``sender`` come from the event.

    Anything malformed or non-canonical raises ``RemoteProtocolError`` (with ``peer=sender``).
    ``max_size`` can only lower the limit below ``MAX_MESSAGE_BYTES``.
    """
    doc = parse_document(data, sender=sender, max_size=max_size)
    return message_of_document(doc, bytes(data), timestamp=timestamp, sender=sender)
