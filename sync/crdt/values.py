"""Cell values, column types and the canonical text of a value.

A value is one JSON scalar: ``str``, ``int`` (signed 64-bit, never ``bool``), ``float`` (finite),
``bool`` or ``None``. The canonical text of a value (its compact JSON, non-ASCII kept as UTF-8)
is injective over values, so it serves both the wire encoding and the LWW tie-break: two writes
with different values never compare equal, even ``1``, ``1.0``, ``true`` and ``"1"``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from enum import StrEnum

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "ColumnType",
    "Value",
    "is_identifier",
    "is_unicode",
    "parse_assignments",
    "parse_typed",
    "value_problem",
    "value_text",
]

Value = str | int | float | bool | None

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# Table and column names end up as SQL identifiers in storage/, so only plain ones are allowed.
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def is_unicode(text: str) -> bool:
    """False for a ``str`` holding lone surrogates, which have no UTF-8 encoding."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_identifier(name: object) -> bool:
    """True for a name usable as a table or column: ``[A-Za-z_][A-Za-z0-9_]{0,62}``."""
    return isinstance(name, str) and _IDENTIFIER.fullmatch(name) is not None


class ColumnType(StrEnum):
    """Declared type of a replicated column; every column also accepts ``None`` (SQL NULL)."""

    TEXT = "text"
    INTEGER = "integer"
    REAL = "real"
    BOOLEAN = "boolean"

    def accepts(self, value: Value) -> bool:
        if value is None:
            return True
        if self is ColumnType.TEXT:
            return isinstance(value, str)
        if self is ColumnType.INTEGER:
            return isinstance(value, int) and not isinstance(value, bool)
        if self is ColumnType.REAL:
            return isinstance(value, float)
        return isinstance(value, bool)


def value_problem(value: object) -> str | None:
    """Why ``value`` cannot be a cell value, or None if it can."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return None if is_unicode(value) else "string with lone surrogates"
    if isinstance(value, int):
        if INT64_MIN <= value <= INT64_MAX:
            return None
        return "integer outside signed 64-bit range"
    if isinstance(value, float):
        return None if math.isfinite(value) else "non-finite float"
    return f"unsupported value type {type(value).__name__}"


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def parse_typed(kind: ColumnType, text: str) -> Value:
    """``text`` (as typed on a command line or in a query string) as a value of ``kind``.

    :raises ValueError: with what was expected, when ``text`` is not one.
    """
    if kind is ColumnType.TEXT:
        return text
    if kind is ColumnType.INTEGER:
        try:
            number = int(text, 10)
        except ValueError:
            number = INT64_MAX + 1
        if not INT64_MIN <= number <= INT64_MAX:
            raise ValueError(f"an integer column, got {text!r} (a signed 64-bit integer)")
        return number
    if kind is ColumnType.REAL:
        try:
            real = float(text)
        except ValueError:
            real = math.nan
        if not math.isfinite(real):
            raise ValueError(f"a real column, got {text!r} (a finite number)")
        return real
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise ValueError(f"a boolean column, got {text!r} (true or false)")


def parse_assignments(table: str, columns: Mapping[str, ColumnType], items: Iterable[str],
                      *, check_json: bool = True) -> dict[str, Value]:
    """``COLUMN=VALUE`` (typed by the column, ``parse_typed``) and ``COLUMN:=JSON`` items, as
    given on a command line or in a query string, checked against ``columns`` (in the order to
    name them in an error); ``check_json``: also check a JSON literal's type.

    :raises ValueError: one sentence naming the item and what is allowed.
    """
    out: dict[str, Value] = {}
    for item in items:
        name, sep, text = item.partition("=")
        as_json = name.endswith(":")
        name = name.removesuffix(":")
        if not sep or not name:
            raise ValueError(f"expected COLUMN=VALUE or COLUMN:=JSON, got {item!r}")
        kind = columns.get(name)
        if kind is None:
            raise ValueError(f"table {table} has no column {name!r} (columns: "
                             f"{', '.join(columns) or 'none'})")
        if name in out:
            raise ValueError(f"column {name} given twice")
        if not as_json:
            try:
                out[name] = parse_typed(kind, text)
            except ValueError as exc:
                raise ValueError(f"{name} is {exc}") from None
            continue
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            raise ValueError(f"{name}:= needs a JSON value, got {text!r}") from None
        if check_json:
            if kind is ColumnType.REAL and type(value) is int:
                value = float(value)  # JSON has one number type
            if value_problem(value) is not None or not kind.accepts(value):
                article = "an" if kind is ColumnType.INTEGER else "a"
                raise ValueError(f"{name} is {article} {kind.value} column, got {text!r}")
        out[name] = value
    return out


_TEXT = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def value_text(value: Value) -> str:
    """The canonical text of a value: compact JSON, e.g. ``"abc"``, ``12``, ``1.5``, ``true``."""
    # What json.dumps writes for these, without its per-call set-up (this runs for every cell
    # written): ints and finite floats by their repr, the three constants by name.
    kind = type(value)
    if kind is int:
        return int.__repr__(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    if kind is float and math.isfinite(value):  # type: ignore[arg-type]
        return float.__repr__(value)
    return _TEXT.encode(value)
