"""``SdsChannel``'s public surface stays small (about a dozen members, as h11's ``Connection``):
the protocol's steps and two read-only views, ``setup`` and ``layers``. Its persistence reads
the layers' public members only: what a caller or the state codec needs beyond the steps is
reached through the layer objects the channel exposes."""

from __future__ import annotations

import ast
from pathlib import Path

from sync.sds import SdsChannel
from sync.sds.channel_setup import ChannelSetup
from sync.sds.layers import ChannelLayers
from tests.sync.sds.helpers import channel

SDS = Path(__file__).resolve().parents[3] / "sync" / "sds"

#: The steps: inputs, then outputs, then persistence.
METHODS = {"send", "receive", "receive_event", "deliver_settled", "delivered_read", "forget",
           "handle_timer", "events", "get_timer", "snapshot", "restore"}
#: The read-only views.
VIEWS = {"setup", "layers"}
#: What the layers record holds for callers and the state codec.
LAYERS = {"config", "timers", "log", "history", "bloom", "incoming", "outgoing", "repair",
          "schedule", "signatures", "stats"}


def test_the_channel_has_a_small_public_surface() -> None:
    ch = channel(0)
    public = {name for name in dir(ch) if not name.startswith("_")}
    methods = {name for name in public if callable(getattr(SdsChannel, name, None))}
    assert methods == METHODS
    assert public - methods == VIEWS
    for view in VIEWS:  # read through, never replaced
        assert isinstance(getattr(SdsChannel, view), property)
        assert getattr(SdsChannel, view).fset is None
    assert set(ChannelLayers.__dataclass_fields__) == LAYERS
    assert set(ChannelSetup.__dataclass_fields__) == {"channel_id", "participant_id", "config",
                                                      "profile"}


def test_the_channel_keeps_few_attributes() -> None:
    """Its steps read ``self._...`` for every message: with more than 29 instance attributes
    CPython 3.11 no longer shares the class's key table and each read is slower (the receive
    path lost ~1%)."""
    channel(0)  # the first instance sets the class's shared keys
    assert len(vars(channel(1))) <= 29


def test_persistence_reads_no_private_member_and_not_the_channel() -> None:
    tree = ast.parse((SDS / "persist.py").read_text(encoding="utf-8"))
    private = sorted({node.attr for node in ast.walk(tree)
                      if isinstance(node, ast.Attribute) and node.attr.startswith("_")
                      and not node.attr.startswith("__")})
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert private == []
    assert "sync.sds.channel" not in imported
