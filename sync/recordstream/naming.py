"""File names of the v6 layout: ``<ISO-8601 instant, colons as underscores, 9-digit nanos>Z``.

``record<node>/2022-07-13T08_46_08.041986003Z.rcd.gz`` is a record file,
``record<node>/sidecar/2022-07-13T08_46_08.041986003Z_01.rcd.gz`` its first sidecar and
``record<node>/2022-07-13T08_46_08.041986003Z.rcd_sig`` a node's signature file. Files named as
in HIP-435's own example (``<instant>.gz``, ``<instant>_01.gz``) are read too; we write
Hedera's bucket names.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from sync.errors import LocalProtocolError

__all__ = [
    "HIP_SUFFIX",
    "RECORD_SUFFIX",
    "SIGNATURE_SUFFIX",
    "format_instant",
    "parse_instant",
    "record_file_name",
    "sidecar_file_name",
    "signature_file_name",
    "split_stream_name",
]

RECORD_SUFFIX = ".rcd.gz"
HIP_SUFFIX = ".gz"
SIGNATURE_SUFFIX = ".rcd_sig"
_NS = 1_000_000_000
_INSTANT = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}_\d{2}_\d{2})\.(\d{9})Z$")
_SIDECAR_STEM = re.compile(r"^(.*)_(\d{2})$")


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


def split_stream_name(name: str) -> tuple[str, str] | None:
    """``(stem, suffix)`` of a record or sidecar file name: any ``*.rcd.gz``, or a ``*.gz`` whose
    stem is an instant (``_NN`` appended for a sidecar) as in HIP-435's example; else None."""
    if name.endswith(RECORD_SUFFIX):
        return name[: -len(RECORD_SUFFIX)], RECORD_SUFFIX
    if name.endswith(HIP_SUFFIX):
        stem = name[: -len(HIP_SUFFIX)]
        sidecar = _SIDECAR_STEM.match(stem)
        base = sidecar.group(1) if sidecar is not None else stem
        if parse_instant(base) is not None:
            return stem, HIP_SUFFIX
    return None


def _split(record_name: str) -> tuple[str, str]:
    parts = split_stream_name(record_name)
    if parts is None:
        raise LocalProtocolError(f"not a record file name: {record_name}")
    return parts


def sidecar_file_name(record_name: str, sidecar_id: int) -> str:
    """The sidecar's name, with the record file's suffix (``.rcd.gz`` or ``.gz``)."""
    stem, suffix = _split(record_name)
    return f"{stem}_{sidecar_id:02d}{suffix}"


def signature_file_name(record_name: str) -> str:
    return _split(record_name)[0] + SIGNATURE_SUFFIX
