"""The leaf exceptions of (nested) exception groups, and their tracebacks as text.

trio wraps a task's error once per nursery between it and the caller, and the daemon nests
more than ten (libp2p's services, the host, the node's services): Python's default hook stops
printing at ten levels of groups, so the exception that mattered never showed. These helpers
flatten the groups and format every leaf in full (with its cause and context chain).
"""

from __future__ import annotations

import traceback

__all__ = ["format_leaves", "leaf_exceptions", "summarise_leaves"]


def leaf_exceptions(error: BaseException) -> list[BaseException]:
    """``error`` itself, or the leaves of every group nested in it, in order."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaf_exceptions(inner)]
    return [error]


def summarise_leaves(error: BaseException) -> str:
    """One line naming every leaf: ``PeerStoreError: 'peer ID is expired'; ...``."""
    return "; ".join(f"{type(leaf).__name__}: {leaf}".replace("\n", " ")
                     for leaf in leaf_exceptions(error))


def format_leaves(error: BaseException) -> str:
    """The full traceback of every leaf, one after another."""
    leaves = leaf_exceptions(error)
    parts = []
    for number, leaf in enumerate(leaves, start=1):
        head = f"leaf {number} of {len(leaves)}:\n" if len(leaves) > 1 else ""
        parts.append(head + "".join(traceback.format_exception(leaf)))
    return "".join(parts)
