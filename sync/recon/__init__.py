"""Recon (CIP-124) range-based set reconciliation, sans-IO."""

from __future__ import annotations

from sync.recon.sha256a import LANES, MASK32, Sha256a, lanes_of

__all__ = ["LANES", "MASK32", "Sha256a", "lanes_of"]
