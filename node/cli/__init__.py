"""The ``syncnode`` command line. Client commands stay light: stdlib plus ``node.cli.common``."""

from __future__ import annotations

from node.cli.main import main

__all__ = ["main"]
