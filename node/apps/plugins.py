"""The applications this node hosts on its event log (see ``node.apps.AppPlugin``)."""

from __future__ import annotations

from node.apps.blocks_plugin import BlocksPlugin
from node.apps.db_plugin import DbPlugin
from node.apps.runner import AppPlugin

__all__ = ["PLUGINS"]

PLUGINS: list[AppPlugin] = [BlocksPlugin(), DbPlugin()]
