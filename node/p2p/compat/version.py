"""The one py-libp2p release the compat package was checked against."""

from __future__ import annotations

import importlib.metadata

import libp2p

from node.p2p.frames import P2PError

__all__ = ["SUPPORTED_LIBP2P_VERSION", "check_libp2p_version", "require"]

SUPPORTED_LIBP2P_VERSION = "0.8.1"


def check_libp2p_version() -> None:
    """Refuse to run (and to patch internals) against any py-libp2p but the one we studied."""
    installed = importlib.metadata.version("libp2p")
    module_version = getattr(libp2p, "__version__", installed)
    if installed != SUPPORTED_LIBP2P_VERSION or module_version != SUPPORTED_LIBP2P_VERSION:
        raise P2PError(
            f"node.p2p supports py-libp2p {SUPPORTED_LIBP2P_VERSION} only (found {installed}): "
            "it patches internals whose names and defaults change between releases; re-check "
            "every entry of node/p2p/compat (docs/upstream.md) before changing the pin"
        )


def require(owner: object, *names: str) -> None:
    """``P2PError`` unless ``owner`` (a libp2p module or class) still has every one of ``names``."""
    label = getattr(owner, "__qualname__", None) or getattr(owner, "__name__", repr(owner))
    for name in names:
        if not hasattr(owner, name):
            raise P2PError(f"libp2p {label}.{name} is gone: re-check node/p2p/compat")
