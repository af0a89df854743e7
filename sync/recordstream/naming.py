"""File names of the v6 layout: ``<ISO-8601 instant, colons as underscores, 9-digit nanos>Z``.

``record<node>/2022-07-13T08_46_08.041986003Z.rcd.gz`` is a record file,
``record<node>/sidecar/2022-07-13T08_46_08.041986003Z_01.rcd.gz`` its first sidecar and
``record<node>/2022-07-13T08_46_08.041986003Z.rcd_sig`` a node's signature file.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from sync.errors import LocalProtocolError

__all__ = [
    "RECORD_SUFFIX",
    "SIGNATURE_SUFFIX",
    "format_instant",
    "parse_instant",
    "record_file_name",
    "sidecar_file_name",
    "signature_file_name",
]

RECORD_SUFFIX = ".rcd.gz"
SIGNATURE_SUFFIX = ".rcd_sig"
_NS = 1_000_000_000
_INSTANT = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}_\d{2}_\d{2})\.(\d{9})Z$")


def format_instant(consensus_ns: int) -> str:
    seconds, nanos = divmod(consensus_ns, _NS)
    try:
        moment = datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise LocalProtocolError(f"consensus time {consensus_ns} not representable") from exc
    if not 1 <= moment.year <= 9999:
        raise LocalProtocolError(f"consensus time {consensus_ns} outside years 1-9999")
    return f"{moment.strftime('%Y-%m-%dT%H_%M_%S')}.{nanos:09d}Z"


def parse_instant(text: str) -> int | None:
    """The ns timestamp a name stem encodes, or None when it is not one of ours."""
    match = _INSTANT.match(text)
    if match is None:
        return None
    try:
        moment = datetime.strptime(match.group(1), "%Y-%m-%dT%H_%M_%S").replace(tzinfo=UTC)
    except ValueError:
        return None
    return int(moment.timestamp()) * _NS + int(match.group(2))


def record_file_name(first_consensus_ns: int) -> str:
    return format_instant(first_consensus_ns) + RECORD_SUFFIX


def _stem(record_name: str) -> str:
    if not record_name.endswith(RECORD_SUFFIX):
        raise LocalProtocolError(f"not a record file name: {record_name}")
    return record_name[: -len(RECORD_SUFFIX)]


def sidecar_file_name(record_name: str, sidecar_id: int) -> str:
    return f"{_stem(record_name)}_{sidecar_id:02d}{RECORD_SUFFIX}"


def signature_file_name(record_name: str) -> str:
    return _stem(record_name) + SIGNATURE_SUFFIX
