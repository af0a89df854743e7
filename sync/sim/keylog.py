"""A member's log of Recon keys, and the node's key store over it, driven as the node drives it.

The node keeps its keys in the events table and its Recon core's ``SummaryKeyStore`` asks its
driver for the reads it needs (sync/recon/reads.py); the simulator does the same in memory:
:class:`KeyLog` holds the keys (a ``MemoryKeyStore`` standing in for the table) and answers the
store's reads, a commit enters the log first and the store next (``insert_keys``), and every
``ReadKeys`` of an exchange step is answered, and the step goes on (:meth:`KeyLog.step`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sync.recon import KeysRead, MemoryKeyStore, SummaryKeyStore, carry_out_reads, insert_keys
from sync.replication import Action

__all__ = ["KeyLog"]

# Above every key (keys are at most ``ReconConfig.max_key_bytes``, 256 bytes): "to the end".
_END = b"\xff" * 257


class KeyLog:
    """One member's keys (:attr:`log`) and its Recon key store (:attr:`store`) on the node's
    default limits; the store learns each key after the log holds it."""

    def __init__(self) -> None:
        self.log = MemoryKeyStore()
        self.store = SummaryKeyStore()

    # The driver's reader (``sync.recon.KeyReader``) over the log.
    def present(self, keys: Sequence[bytes]) -> set[bytes]:
        return {k for k in keys if self.log.contains(k)}

    def keys(self, lo: bytes, hi: bytes | None, limit: int) -> list[bytes]:
        return self.log.keys(lo, _END if hi is None else hi, limit)

    def add(self, key: bytes) -> None:
        """Commit ``key`` to the log, then account it in the store (when new)."""
        if self.log.insert(key):
            insert_keys(self.store, [key], self)

    def contains(self, key: bytes) -> bool:
        return self.log.contains(key)

    def step(self, actions: list[Action],
             keys_read: Callable[[KeysRead], list[Action]]) -> list[Action]:
        """A step's actions once its ``ReadKeys`` are answered (the node's Recon worker):
        ``keys_read`` is the session's input for them (``ReplicationCore.keys_read``)."""
        return carry_out_reads(actions, self, keys_read)
