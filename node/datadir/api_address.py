"""Where a data dir's node serves its API: ``<data_dir>/api_url``, as kubo's ``$IPFS_PATH/api``.

The node writes the URL it actually bound (``api.listen`` may name port 0, and ``run --api``
overrides the config) once the API answers, and removes it when it stops cleanly (and, at
start, one a killed node left); client
commands read it so that ``--data-dir DIR`` (or ``--config``) alone finds the node. Nothing
secret is in it. Stdlib only: every client command reads it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["API_URL_FILE", "clear_api_url", "read_api_url", "remove_api_url", "write_api_url"]

API_URL_FILE = "api_url"
_MAX_BYTES = 1024


def write_api_url(data_dir: str | Path, url: str) -> None:
    """Record ``url`` atomically (a reader never sees half a URL)."""
    path = Path(data_dir) / API_URL_FILE
    tmp = path.with_name(f".{API_URL_FILE}.{os.getpid()}.tmp")
    tmp.write_text(url + "\n", encoding="ascii")
    os.replace(tmp, path)


def read_api_url(data_dir: str | Path) -> str | None:
    """The URL the data dir's node last announced, or None (never ran, or stopped cleanly)."""
    try:
        with (Path(data_dir).expanduser() / API_URL_FILE).open("rb") as f:
            # The client sends its token to this address: one planted by another user (a
            # shared or group-writable directory) is not followed, as ssh ignores such files.
            if os.fstat(f.fileno()).st_uid not in (os.getuid(), 0):
                return None
            text = f.read(_MAX_BYTES).decode("ascii", "replace").strip()
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    return text or None


def remove_api_url(data_dir: str | Path, url: str) -> None:
    """Remove the file if it still names ``url`` (not a later node's address)."""
    if read_api_url(data_dir) == url:
        with contextlib.suppress(OSError):
            (Path(data_dir) / API_URL_FILE).unlink()


def clear_api_url(data_dir: str | Path) -> None:
    """Remove whatever the file says: called by a node that just took the data dir's lock, so
    any URL in it is a killed node's."""
    with contextlib.suppress(OSError):
        (Path(data_dir) / API_URL_FILE).unlink()
