"""The applications this node hosts on its event log (see ``node.apps.AppPlugin``)."""

from __future__ import annotations

from node.apps import AppPlugin
from node.blocks_plugin import BlocksPlugin
from node.db_plugin import DbPlugin

__all__ = ["PLUGINS"]

PLUGINS: list[AppPlugin] = [BlocksPlugin(), DbPlugin()]
