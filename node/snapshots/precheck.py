"""What a load from a snapshot directory (``bootstrap``, ``snapshot pull``) can check with light
imports only: the trusted signers and the manifest.

The CLI checks these before it imports the loader (the database layer, libp2p: seconds of
start-up) and before it touches the data dir, so a wrong argument or directory is told at once
and leaves the data dir as it was. The loader runs the same checks again (it is also called
without the CLI).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from node.config.checks import check_peer_ids
from node.datadir import KEY_FILE
from sync.errors import RemoteProtocolError
from sync.snapshot_manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest, decode_manifest

if TYPE_CHECKING:
    from node.config.settings import Config

__all__ = ["BootstrapError", "check_before_load", "open_manifest", "trusted_signers"]


class BootstrapError(Exception):
    """The snapshot or the target database is unusable; the message says why.

    ``input_error``: the snapshot itself is at fault (malformed, fails verification, another
    network), as opposed to the database (not empty, unreachable).
    """

    def __init__(self, message: str, *, input_error: bool = True) -> None:
        self.input_error = input_error
        super().__init__(message)


def open_manifest(snapshot: Path) -> Manifest:
    path = snapshot / MANIFEST_NAME
    if not path.exists():
        raise BootstrapError(f"{snapshot}: no manifest.json (not a snapshot directory)")
    try:
        # One byte more than the limit: the decoder tells a too-large file from one at it.
        with path.open("rb") as fh:
            return decode_manifest(fh.read(MAX_MANIFEST_BYTES + 1), str(path))
    except RemoteProtocolError as exc:
        raise BootstrapError(f"{snapshot}: {exc}") from None


def trusted_signers(config: Config, flags: Iterable[str], own: str | None) -> frozenset[str]:
    """The peer ids whose snapshots a load trusts: ``flags`` (``--signer``), else the config
    key, else the defaults (``own``, this data dir's key, and the allowed peers);
    ``BootstrapError`` when that leaves nobody."""
    flagged = tuple(flags)
    if flagged and (problem := check_peer_ids(flagged)):
        raise BootstrapError(f"--signer: {problem}")
    signers = frozenset(flagged or config.spark.snapshot_signers or (
        *([own] if own else []), *config.p2p.allowed_peers))
    if not signers:
        raise BootstrapError("no trusted snapshot signer: pass --signer PEER_ID (the node "
                             "that built the snapshot) or set spark.snapshot_signers")
    return signers


def check_before_load(config: Config, flags: Iterable[str], snapshot: Path) -> None:
    """``BootstrapError`` for a load that the signers or the manifest already rule out, in the
    loader's order. Where only the data dir's own key could name a signer, reading it takes
    libp2p's identity code: the loader checks the signers then, and the manifest after them."""
    flagged = tuple(flags)
    if not (flagged or config.spark.snapshot_signers or config.p2p.allowed_peers) and \
            (config.data_path / KEY_FILE).is_file():
        return
    trusted_signers(config, flagged, None)
    open_manifest(snapshot)
