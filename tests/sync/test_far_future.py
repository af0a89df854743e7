"""Far-future Lamport times in the applications (attack 6), once the clock rule holds.

A CRDT write or delete is stamped with its event's Lamport time. The clock rule rejects any
event more than ``max_lamport_ahead_ms`` ahead of the receiver's wall clock, and an event
within the bound moves the receiver's clock past it, so the next honest write wins: one
far-future event cannot capture a cell or an entity for good.
"""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sync.crdt import CrdtMessage, MemoryReplica, Operation, TableSchema
from sync.crdt.message import decode_message, encode_message
from sync.errors import RemoteProtocolError
from sync.identity import peer_id_of
from sync.sds import Delivered, SdsChannel, SdsConfig, decode_transmission, encode_event
from tests.sync.sds.helpers import CHANNEL, T0, channel, of_type

OPEN = TableSchema("artists", {"name": "text"})  # no writers allowlist: any member may write
AHEAD = SdsConfig().max_lamport_ahead_ms
NOW_MS = int(T0 * 1000)


def content(op: Operation, **cells: str) -> bytes:
    values = cells if op is not Operation.DELETE else {}
    return encode_message(CrdtMessage(op, "artists", "a1", values, timestamp=0, sender="x"))


def attacker_event(lamport: int, op: Operation, **cells: str) -> bytes:
    k = Ed25519PrivateKey.generate()
    return encode_event(CHANNEL, peer_id_of(k), lamport, (), content(op, **cells), k).wire


class HonestNode:
    """An SDS channel feeding a CRDT replica, as a node's db application does."""

    def __init__(self, i: int) -> None:
        self.ch: SdsChannel = channel(i)
        self.replica = MemoryReplica([OPEN])

    def apply_delivered(self) -> None:
        for ev in of_type(self.ch.events(), Delivered):
            msg = decode_message(ev.content, timestamp=ev.lamport, sender=ev.sender_id)
            self.replica.apply(msg)

    def receive(self, wire: bytes, now: float) -> None:
        self.ch.receive(wire, now)
        self.apply_delivered()

    def write(self, now: float, op: Operation, **cells: str) -> bytes:
        wire = self.ch.send(content(op, **cells), now)
        self.apply_delivered()
        return wire


def test_far_future_write_beyond_the_bound_never_reaches_the_table() -> None:
    node = HonestNode(0)
    node.write(T0, Operation.UPSERT, name="honest")
    with pytest.raises(RemoteProtocolError):
        node.receive(attacker_event(NOW_MS + 10 * 365 * 86_400_000, Operation.UPDATE,
                                    name="captured"), T0)
    assert node.replica.get("artists", "a1") == {"name": "honest"}


def test_write_at_the_bound_wins_only_until_the_next_honest_write() -> None:
    a, b = HonestNode(0), HonestNode(1)
    first = a.write(T0, Operation.UPSERT, name="honest")
    b.receive(first, T0)
    edge = attacker_event(NOW_MS + AHEAD, Operation.UPDATE, name="captured")
    for node in (a, b):
        node.receive(edge, T0)
        assert node.replica.get("artists", "a1") == {"name": "captured"}
    # The next honest write, a second later by the wall clock, is stamped after it and wins
    # on every replica, whichever node writes it.
    wire = b.write(T0 + 1, Operation.UPDATE, name="honest again")
    assert decode_transmission(wire).event.lamport == NOW_MS + AHEAD + 1  # type: ignore[operator]
    a.receive(wire, T0 + 1)
    for node in (a, b):
        assert node.replica.get("artists", "a1") == {"name": "honest again"}


def test_far_future_delete_does_not_kill_the_entity_for_good() -> None:
    a = HonestNode(0)
    a.write(T0, Operation.UPSERT, name="alive")
    with pytest.raises(RemoteProtocolError):
        a.receive(attacker_event(NOW_MS + 100 * AHEAD, Operation.DELETE), T0)
    assert a.replica.get("artists", "a1") == {"name": "alive"}
    a.receive(attacker_event(NOW_MS + AHEAD, Operation.DELETE), T0)
    assert a.replica.get("artists", "a1") is None
    a.write(T0 + 1, Operation.UPSERT, name="alive again")
    assert a.replica.get("artists", "a1") == {"name": "alive again"}


def test_a_node_that_missed_the_event_wins_once_its_wall_clock_passes_it() -> None:
    """A replica that never saw the far-future write still overtakes it within the bound."""
    a, late = HonestNode(0), HonestNode(1)
    a.receive(attacker_event(NOW_MS + AHEAD, Operation.UPSERT, name="captured"), T0)
    wire = late.write(T0 + AHEAD / 1000 + 1, Operation.UPSERT, name="later by the clock")
    a.receive(wire, T0 + AHEAD / 1000 + 1)
    assert a.replica.get("artists", "a1") == {"name": "later by the clock"}
