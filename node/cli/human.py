"""Values as people read them in the client commands' text output (``--json`` keeps the raw
numbers): UTC ISO times, durations, byte sizes. Stdlib only."""

from __future__ import annotations

import time

__all__ = ["human_duration", "human_size", "iso_ms", "iso_s"]


def iso_ms(epoch_ms: int) -> str:
    """``2026-11-26T07:40:12.345Z``: an epoch-millisecond value (a Lamport time) in UTC."""
    seconds, millis = divmod(int(epoch_ms), 1000)
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
    except (OverflowError, OSError, ValueError):
        return str(epoch_ms)  # far outside what a clock gives: show the number itself


def iso_s(epoch_s: float) -> str:
    """``2026-11-26T07:40:12Z``: epoch seconds (``time.time()``) in UTC."""
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))
    except (OverflowError, OSError, ValueError):
        return str(epoch_s)


def human_duration(seconds: float) -> str:
    """``0.4 s``, ``12 s``, ``3 min 05 s``, ``2 h 03 min``, ``4 d 06 h``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours:02d} h"


def human_size(size: float) -> str:
    """``512 B``, ``1.5 KiB``, ``12.0 MiB``, ``3.2 GiB``."""
    if size < 1024:
        return f"{int(size)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            break
    return f"{size:.1f} {unit}"
