"""The node's Ed25519 identity key, kept in ``<data_dir>/identity.key`` (PKCS#8 PEM, mode 0600).

The libp2p peer id is derived from this key, so it stays the same across restarts.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)

from node.datadir import KEY_FILE

__all__ = ["KEY_FILE", "IdentityError", "load_identity", "load_or_create_identity"]

log = logging.getLogger("syncnode.identity")


class IdentityError(ValueError):
    pass


def load_identity(path: Path) -> Ed25519PrivateKey:
    try:
        key = load_pem_private_key(path.read_bytes(), password=None)
    except ValueError as exc:
        raise IdentityError(f"cannot read identity key {path}: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise IdentityError(f"identity key {path} is not an Ed25519 key")
    return key


def load_or_create_identity(data_dir: Path) -> Ed25519PrivateKey:
    path = data_dir / KEY_FILE
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            log.warning("identity key %s had mode %o; tightening to 600", path, mode)
            path.chmod(0o600)
        return load_identity(path)
    data_dir.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    # O_EXCL: never overwrite a key another process created in the meantime.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
        fh.flush()
        os.fsync(fh.fileno())
    return key
