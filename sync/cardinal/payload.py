"""Block payloads: what a producer splits into messages and a consumer reassembles.

Payloads are canonical: updates are sorted ``(key, value)`` pairs, deletes sorted unique keys and
sub batches sorted by name, so that two payloads with the same content compare equal whatever
order they were built or reassembled in. Build them with :func:`make_payload`.

JSON form (one object per line in a ``.jsonl`` file)::

    {"hash": "0x<64 hex>", "number": 7, "parent": "0x<64 hex>", "weight": "7",
     "updates": {"key": "0x<hex>"}, "deletes": ["key"],
     "sub_batches": [{"name": "state/", "id": "0x<64 hex>",
                      "updates": {"key": "0x<hex>"}, "deletes": ["key"]}]}

``weight`` is optional (defaults to ``number``) and may be a JSON integer or a decimal string;
``updates``, ``deletes`` and ``sub_batches`` are optional. Values are ``0x``-prefixed hex.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sync.cardinal.codec import HASH_SIZE, ZERO_HASH
from sync.errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "BlockPayload",
    "SubBatch",
    "iter_payloads_jsonl",
    "make_payload",
    "make_sub_batch",
    "payload_from_json",
    "payload_to_json",
]

_MAX_NUMBER = (1 << 63) - 1
_MAX_WEIGHT = (1 << 256) - 1

Updates = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class SubBatch:
    """A sub batch: a named group of updates and deletes sent after (or apart from) the Batch."""

    name: str
    id: bytes
    updates: Updates = ()
    deletes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BlockPayload:
    """One block: header fields, updates, deletes and sub batches, in canonical order."""

    hash: bytes
    number: int
    parent: bytes
    weight: int
    updates: Updates = ()
    deletes: tuple[str, ...] = ()
    sub_batches: tuple[SubBatch, ...] = ()

    def __post_init__(self) -> None:
        _check_hash("hash", self.hash)
        _check_hash("parent", self.parent)
        if not 0 <= self.number <= _MAX_NUMBER:
            raise LocalProtocolError(f"number out of range: {self.number}")
        if not 0 <= self.weight <= _MAX_WEIGHT:
            raise LocalProtocolError(f"weight out of range: {self.weight}")

    def updates_dict(self) -> dict[str, bytes]:
        return dict(self.updates)


def _check_hash(name: str, value: bytes) -> None:
    if not isinstance(value, bytes) or len(value) != HASH_SIZE:
        raise LocalProtocolError(f"{name} must be {HASH_SIZE} bytes")


def make_sub_batch(
    name: str,
    batch_id: bytes,
    updates: Mapping[str, bytes] | None = None,
    deletes: Iterable[str] = (),
) -> SubBatch:
    _check_hash("sub batch id", batch_id)
    if batch_id == ZERO_HASH:
        raise LocalProtocolError("a sub batch id must not be all zeros")
    return SubBatch(
        name, batch_id, tuple(sorted((updates or {}).items())), tuple(sorted(set(deletes)))
    )


def make_payload(
    hash: bytes,
    number: int,
    parent: bytes,
    weight: int | None = None,
    updates: Mapping[str, bytes] | None = None,
    deletes: Iterable[str] = (),
    sub_batches: Iterable[SubBatch] = (),
) -> BlockPayload:
    """A canonical payload; ``weight`` defaults to ``number`` as the spec suggests."""
    subs = tuple(sorted(sub_batches, key=lambda s: s.name))
    if len({s.name for s in subs}) != len(subs) or len({s.id for s in subs}) != len(subs):
        raise LocalProtocolError("sub batch names and ids must be unique within a payload")
    return BlockPayload(
        hash,
        number,
        parent,
        number if weight is None else weight,
        tuple(sorted((updates or {}).items())),
        tuple(sorted(set(deletes))),
        subs,
    )


# ---------------------------------------------------------------------------------------------
# JSON


def _hex(value: bytes) -> str:
    return "0x" + value.hex()


def payload_to_json(payload: BlockPayload) -> dict[str, Any]:
    """The JSON object of ``payload`` (see the module docstring); round-trips exactly."""
    obj: dict[str, Any] = {
        "hash": _hex(payload.hash),
        "number": payload.number,
        "parent": _hex(payload.parent),
        "weight": str(payload.weight),
        "updates": {k: _hex(v) for k, v in payload.updates},
        "deletes": list(payload.deletes),
    }
    if payload.sub_batches:
        obj["sub_batches"] = [
            {
                "name": s.name,
                "id": _hex(s.id),
                "updates": {k: _hex(v) for k, v in s.updates},
                "deletes": list(s.deletes),
            }
            for s in payload.sub_batches
        ]
    return obj


def _fail(where: str, what: str) -> RemoteProtocolError:
    return RemoteProtocolError(f"{where}: {what}")


def _bytes_of(obj: object, where: str, size: int | None = None) -> bytes:
    if not isinstance(obj, str) or not obj.startswith(("0x", "0X")):
        raise _fail(where, "expected a 0x-prefixed hex string")
    try:
        value = bytes.fromhex(obj[2:])
    except ValueError:
        raise _fail(where, "invalid hex") from None
    if size is not None and len(value) != size:
        raise _fail(where, f"expected {size} bytes, got {len(value)}")
    return value


def _int_of(obj: object, where: str, maximum: int) -> int:
    if isinstance(obj, bool):
        raise _fail(where, "expected an integer")
    if isinstance(obj, str) and obj.isdigit() and obj.isascii() and len(obj) <= 80:
        obj = int(obj)
    if not isinstance(obj, int):
        raise _fail(where, "expected a non-negative integer (or a decimal string)")
    if not 0 <= obj <= maximum:
        raise _fail(where, f"out of range: {obj}")
    return obj


def _key_of(key: str, where: str) -> str:
    try:
        key.encode()
    except UnicodeEncodeError:
        raise _fail(where, f"key {key!r} is not valid Unicode (lone surrogate)") from None
    return key


def _updates_of(obj: object, where: str) -> dict[str, bytes]:
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise _fail(where, "expected an object of key -> 0x-hex value")
    return {_key_of(k, where): _bytes_of(v, f"{where}[{k!r}]") for k, v in obj.items()}


def _deletes_of(obj: object, where: str) -> list[str]:
    if obj is None:
        return []
    if not isinstance(obj, list) or not all(isinstance(k, str) for k in obj):
        raise _fail(where, "expected a list of strings")
    return [_key_of(k, where) for k in obj]


_TOP_KEYS = {"hash", "number", "parent", "weight", "updates", "deletes", "sub_batches"}
_SUB_KEYS = {"name", "id", "updates", "deletes"}


def payload_from_json(obj: object) -> BlockPayload:
    """Parse the JSON object of a payload; errors are RemoteProtocolError naming the field."""
    if not isinstance(obj, dict):
        raise _fail("payload", "expected a JSON object")
    unknown = set(obj) - _TOP_KEYS
    if unknown:
        raise _fail("payload", f"unknown field(s) {sorted(unknown)}")
    for required in ("hash", "number", "parent"):
        if required not in obj:
            raise _fail("payload", f"missing field {required!r}")
    number = _int_of(obj["number"], "number", _MAX_NUMBER)
    subs_raw = obj.get("sub_batches") or []
    if not isinstance(subs_raw, list):
        raise _fail("sub_batches", "expected a list")
    subs = []
    for i, sub in enumerate(subs_raw):
        where = f"sub_batches[{i}]"
        if not isinstance(sub, dict) or not isinstance(sub.get("name"), str):
            raise _fail(where, "expected an object with a string 'name'")
        _key_of(sub["name"], f"{where}.name")
        if set(sub) - _SUB_KEYS:
            raise _fail(where, f"unknown field(s) {sorted(set(sub) - _SUB_KEYS)}")
        batch_id = _bytes_of(sub.get("id"), f"{where}.id", HASH_SIZE)
        if batch_id == ZERO_HASH:
            raise _fail(f"{where}.id", "must not be all zeros")
        subs.append(
            make_sub_batch(
                sub["name"],
                batch_id,
                _updates_of(sub.get("updates"), f"{where}.updates"),
                _deletes_of(sub.get("deletes"), f"{where}.deletes"),
            )
        )
    try:
        return make_payload(
            _bytes_of(obj["hash"], "hash", HASH_SIZE),
            number,
            _bytes_of(obj["parent"], "parent", HASH_SIZE),
            _int_of(obj.get("weight", number), "weight", _MAX_WEIGHT),
            _updates_of(obj.get("updates"), "updates"),
            _deletes_of(obj.get("deletes"), "deletes"),
            subs,
        )
    except LocalProtocolError as exc:
        raise _fail("payload", str(exc)) from None


def iter_payloads_jsonl(lines: Iterable[str], source: str | None = None) -> Iterator[BlockPayload]:
    """Payloads of a JSONL text (blank lines skipped); errors name the source and line."""
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            yield payload_from_json(obj)
        except json.JSONDecodeError as exc:
            raise RemoteProtocolError(f"line {line_no}: invalid JSON: {exc.msg}", source) from None
        except (ValueError, RecursionError) as exc:  # e.g. a 5,000-digit number, deep nesting
            raise RemoteProtocolError(f"line {line_no}: invalid JSON: {exc}", source) from None
        except RemoteProtocolError as exc:
            raise exc.from_peer(source, f"line {line_no}: ") from None
