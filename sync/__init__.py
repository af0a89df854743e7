"""Sans-IO protocol cores: SDS, SDS-R, Recon, CRDT rules, Cardinal Streams, record stream files.

Nothing in this package performs I/O, reads a clock or imports trio, libp2p or SQL.
"""

from __future__ import annotations

from sync.errors import LocalProtocolError, RemoteProtocolError, SyncError

__all__ = ["LocalProtocolError", "RemoteProtocolError", "SyncError"]
