"""libp2p's logging: one module logs on the root logger (entry L1 of ``node.p2p.compat``)."""

from __future__ import annotations

import logging
import os

import libp2p.network.connection.swarm_connection as _swarm_connection_module

from node.p2p.compat.version import require

__all__ = ["patch_root_logging", "set_libp2p_log_level"]


class _NamedLoggingShim:
    """Stands in for the ``logging`` module inside a libp2p module that logs on the root logger.

    ``logging.debug(...)`` on a root logger without handlers runs ``logging.basicConfig()``,
    which would install a stderr handler and make the daemon's own logging setup a no-op.
    """

    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(name)

    def __getattr__(self, attr: str) -> object:
        if attr in ("debug", "info", "warning", "error", "exception", "critical", "log"):
            return getattr(self._logger, attr)
        return getattr(logging, attr)


def patch_root_logging() -> None:
    """Route that module's records through its own named logger, unless LIBP2P_DEBUG is set."""
    if os.environ.get("LIBP2P_DEBUG"):
        return
    require(_swarm_connection_module, "logging")
    shim = _NamedLoggingShim(_swarm_connection_module.__name__)
    setattr(_swarm_connection_module, "logging", shim)  # noqa: B010


def set_libp2p_log_level(level: str) -> None:
    """The level of the ``libp2p`` logger tree (not a patch: public ``logging`` API).

    The logger tree is the process's, like the daemon's own logging setup: the last host
    opened sets it (one node is one process; tests opening several hosts pass one level).
    """
    if os.environ.get("LIBP2P_DEBUG"):
        return
    numeric = logging.getLevelName(level.upper())
    root = logging.getLogger("libp2p")
    root.setLevel(numeric)
    root.propagate = True
    # Some modules pin their own level (auto_connector logs INFO every 30 s): lift them too.
    for name, item in list(logging.root.manager.loggerDict.items()):
        if name.startswith("libp2p.") and isinstance(item, logging.Logger) and item.level:
            item.setLevel(max(item.level, numeric))
