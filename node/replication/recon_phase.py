"""Driving the reconciliation phase of a Recon stream: read a frame, let the sans-IO
:class:`sync.transfer.ReconExchange` decide, write what it says, and wake at its timer (the
phase's deadline, ``recon.session_timeout_s``) when no frame comes before it.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from node.p2p import FramedStream
from sync.transfer import Abort, KeysDropped, ReconExchange, SendFrame
from sync.transfer.exchange import Action

__all__ = ["reconcile"]


async def reconcile(stream: FramedStream, exchange: ReconExchange, first: bytes | None,
                    on_dropped: Callable[[int], None]) -> None:
    """Run the exchange to its end (``first``: the initiator's opening frame). Raises
    ``trio.TooSlowError`` when the exchange aborts at its deadline; ``on_dropped`` hears of
    missing keys beyond the bound."""
    actions: list[Action] = [] if first is None else [SendFrame(first)]
    while True:
        # trio's clock is the exchange's: its timer is a cancel scope's deadline as it is.
        with trio.move_on_at(exchange.get_timer()):
            await _carry_out(stream, actions, on_dropped)
            if exchange.done:
                return
            actions = exchange.receive(await stream.receive(), trio.current_time())
            continue
        actions = exchange.handle_timer(trio.current_time())


async def _carry_out(stream: FramedStream, actions: list[Action],
                     on_dropped: Callable[[int], None]) -> None:
    for action in actions:
        if isinstance(action, SendFrame):
            await stream.send(action.frame)
        elif isinstance(action, KeysDropped):
            on_dropped(action.count)
        elif isinstance(action, Abort):
            raise trio.TooSlowError(action.reason)
