"""Driving the reconciliation phase of a Recon stream: read a frame, let the sans-IO core
decide (``ReplicationCore.receive``, which holds the session's reconciliation), write what it
says, and wake at the session's timer (the phase's deadline, ``recon.session_timeout_s``) when
no frame comes before it.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

from node.p2p import FramedStream
from sync.errors import LocalProtocolError
from sync.recon import KeysRead, ReadKeys
from sync.replication import (
    Abort,
    Action,
    Charge,
    Declined,
    KeysDropped,
    Reconciled,
    ReplicationCore,
    Role,
    SendFrame,
    SessionPlan,
)

__all__ = ["FrameCharger", "reconcile"]

#: Runs a step of the session (``fn``), feeding its key-store reads back (``keys_read``) until
#: it runs through: ``KeyStoreWork.step``, in the Recon worker thread.
Work = Callable[[Callable[[], list[Action]], Callable[[KeysRead], list[Action]]],
                Awaitable[list[Action]]]


class FrameCharger(Protocol):
    """What the peer pays for each frame (``node.replication.work.FrameCharges``)."""

    async def before(self, nbytes: int) -> None: ...

    async def after(self, units: int) -> None: ...


async def reconcile(stream: FramedStream, core: ReplicationCore, plan: SessionPlan,
                    on_dropped: Callable[[int], None], *, work: Work,
                    charges: FrameCharger | None = None,
                    now: Callable[[], float]) -> Reconciled | Declined:
    """Run the session's reconciliation to its end (the initiator opens it) and return how it
    ended. Raises ``trio.TooSlowError`` when it aborts at its
    deadline; ``on_dropped`` hears of missing keys beyond the bound. Each frame from the peer is
    charged to it before it is read (``charges.before``, by its size); with a charging setup
    (``ExchangeSetup.charging``) the frame is then decoded and settled by the work it asks
    before it is answered (``charges.after``: paid even if refused, the decoding is done).
    ``work`` runs each step in the Recon worker thread, which carries out its key-store reads
    (``KeyStoreWork.step``). ``now``: the driver's injected clock (``Clock.now``, trio's: the
    timer is a cancel scope's deadline)."""
    keys_read = functools.partial(core.keys_read, plan)
    actions: list[Action] = (await work(functools.partial(core.start, plan), keys_read)
                             if plan.role is Role.INITIATOR else [])
    while True:
        # trio's clock is the core's: the session's timer is a cancel scope's deadline as it is.
        with trio.move_on_at(core.session_timer(plan)):
            if (ended := await _carry_out(stream, actions, on_dropped)) is not None:
                return ended
            # Charged in advance by its announced size, before its body is read or decoded.
            if charges is not None:
                await charges.before(await stream.next_size())
            frame = await stream.receive()
            actions = await work(functools.partial(core.receive, plan, frame, now()), keys_read)
            if actions and isinstance(charged := actions[0], Charge):
                if charges is None:
                    raise LocalProtocolError("a charging exchange needs its frame charges")
                await charges.after(charged.units)
                actions = await work(functools.partial(core.charged, plan, now()), keys_read)
            continue
        actions = core.handle_session_timer(plan, now())


async def _carry_out(stream: FramedStream, actions: list[Action],
                     on_dropped: Callable[[int], None]) -> Reconciled | Declined | None:
    for action in actions:
        if isinstance(action, SendFrame):
            await stream.send(action.frame)
        elif isinstance(action, KeysDropped):
            on_dropped(action.count)
        elif isinstance(action, Abort):
            raise trio.TooSlowError(action.reason)
        elif isinstance(action, Reconciled | Declined):
            return action
        elif isinstance(action, ReadKeys | Charge):  # handled before; never the stream
            raise LocalProtocolError(
                f"a Recon step's {type(action).__name__} was left unanswered")
    return None
