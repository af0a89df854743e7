"""The local API's access token: one per data dir, made at first start, readable by its owner only.

Kept free of heavy imports: the CLI reads the token on every invocation.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["TOKEN_ENV", "TOKEN_FILE", "load_or_create_token", "read_token"]

TOKEN_FILE = "api_token"
TOKEN_ENV = "SYNCNODE_API_TOKEN"


def read_token(data_dir: str | Path) -> str | None:
    """The token stored in ``data_dir``, or None when there is none (the node never ran there)."""
    try:
        token = (Path(data_dir) / TOKEN_FILE).read_text(encoding="ascii").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return token or None


def load_or_create_token(data_dir: str | Path) -> str:
    """Return the data dir's token, creating it (mode 0600, never world-readable) if absent."""
    path = Path(data_dir) / TOKEN_FILE
    existing = read_token(data_dir)
    if existing is not None:
        # A token file others can read is as good as none: tighten it rather than refuse.
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)
        return existing
    # Hex, not urlsafe base64: a token that starts with '-' reads as an option to `--token`.
    token = secrets.token_hex(32)
    tmp = path.with_name(f".{TOKEN_FILE}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, (token + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return token
