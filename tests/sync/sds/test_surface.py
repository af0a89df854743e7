"""``SdsChannel``'s public surface stays small (about a dozen members, as h11's ``Connection``)
and its persistence reads the layers' public members only: what a caller or the state codec
needs beyond the steps is reached through the layer objects the channel exposes."""

from __future__ import annotations

import ast
from pathlib import Path

from sync.sds import SdsChannel
from tests.sync.sds.helpers import channel

SDS = Path(__file__).resolve().parents[3] / "sync" / "sds"

METHODS = {"send", "receive", "receive_event", "deliver_settled",
           "handle_timer", "events", "datagrams_to_send", "get_timer", "trust", "forget",
           "sizes", "snapshot", "restore", "delivered_read"}
DATA = {"lamport", "channel_id", "participant_id", "config", "profile", "stats",
        "log", "history", "incoming", "outgoing", "repair"}


def test_the_channel_has_a_small_public_surface() -> None:
    ch = channel(0)
    public = {name for name in dir(ch) if not name.startswith("_")}
    methods = {name for name in public if callable(getattr(SdsChannel, name, None))}
    assert methods == METHODS
    assert public - methods == DATA


def test_persistence_reads_no_private_member_and_not_the_channel() -> None:
    tree = ast.parse((SDS / "persist.py").read_text(encoding="utf-8"))
    private = sorted({node.attr for node in ast.walk(tree)
                      if isinstance(node, ast.Attribute) and node.attr.startswith("_")
                      and not node.attr.startswith("__")})
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert private == []
    assert "sync.sds.channel" not in imported
