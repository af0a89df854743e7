"""SDS-R arithmetic: request and response back-offs and response groups.

``hash(a, b, ...)`` is the first 8 bytes, big-endian, of sha256 over the length-prefixed UTF-8
parts. Back-offs are computed in whole milliseconds. The spec's
``T_req = current_time + hash(participant_id, message_id) % (T_max - T_min) + T_min`` is read with
the usual precedence, ``current_time + (hash % (T_max - T_min)) + T_min``: a back-off uniform in
``[T_min, T_max)``. ``T_resp = current_time + distance * hash(message_id) % T_max`` is read as
``current_time + ((distance * hash(message_id)) % T_max)``: zero for the original sender.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable

__all__ = ["in_response_group", "repair_hash", "t_req", "t_resp"]

_U32 = struct.Struct(">I")
#: ``hash(parts...) -> int``: ours below, or a profile's (``sync.sds.waku.waku_repair_hash``).
RepairHash = Callable[..., int]


def repair_hash(*parts: str) -> int:
    data = b"".join(_U32.pack(len(b)) + b for b in (p.encode() for p in parts))
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def t_req(now: float, participant_id: str, message_id: str, t_min: float, t_max: float,
          hash_fn: RepairHash = repair_hash) -> float:
    """When this participant may first ask for the missing ``message_id``."""
    span = _ms(t_max) - round(t_min * 1000)
    offset_ms = hash_fn(participant_id, message_id) % max(1, span) + round(t_min * 1000)
    return now + offset_ms / 1000.0


def t_resp(now: float, participant_id: str, sender_id: str, message_id: str, t_max: float,
           hash_fn: RepairHash = repair_hash) -> float:
    """When this participant answers a repair request if nobody answered first."""
    distance = hash_fn(participant_id) ^ hash_fn(sender_id)
    return now + (distance * hash_fn(message_id)) % _ms(t_max) / 1000.0


def in_response_group(
    participant_id: str, sender_id: str, message_id: str, num_response_groups: int,
    hash_fn: RepairHash = repair_hash,
) -> bool:
    if num_response_groups <= 1:
        return True
    mine = hash_fn(participant_id, message_id) % num_response_groups
    return mine == hash_fn(sender_id, message_id) % num_response_groups
