"""Run a whole Recon exchange in memory: for tests, benchmarks and local tools."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sync.errors import LocalProtocolError
from sync.recon.reads import KeyReader, ReadKeys, read_keys
from sync.recon.session import MissingKeys, PeerMissingKeys, ReconConfig, ReconSession, Step
from sync.recon.store import KeyStore

__all__ = ["PairResult", "reconcile_in_memory", "shuttle"]


@dataclass(slots=True)
class PairResult:
    """What one exchange cost and found; ``round_trips`` = ceil(messages / 2)."""

    messages: int = 0
    bytes_total: int = 0
    largest_message: int = 0
    initiator_missing: list[bytes] = field(default_factory=list)
    responder_missing: list[bytes] = field(default_factory=list)
    initiator_peer_missing: list[bytes] = field(default_factory=list)
    responder_peer_missing: list[bytes] = field(default_factory=list)

    @property
    def round_trips(self) -> int:
        return (self.messages + 1) // 2


def _collect(session: ReconSession, missing: list[bytes], peer_missing: list[bytes]) -> None:
    for event in session.events():
        if isinstance(event, MissingKeys):
            missing.extend(event.keys)
        elif isinstance(event, PeerMissingKeys):
            peer_missing.extend(event.keys)


def _sent(session: ReconSession, step: Step, reader: KeyReader | None) -> bytes | None:
    """The step's message, its reads answered first (as the node's driver does)."""
    while isinstance(step, ReadKeys):
        if reader is None:
            raise LocalProtocolError("a store that asks for reads needs a reader in shuttle()")
        step = session.keys_read(read_keys(reader, step.reads))
    return step


def shuttle(initiator: ReconSession, responder: ReconSession,
            readers: tuple[KeyReader | None, KeyReader | None] = (None, None)) -> PairResult:
    """Pass bytes between the two sessions until both are done (the link is perfect).
    ``readers``: what answers the reads of each side's store (none for stores in memory)."""
    result = PairResult()
    data = _sent(initiator, initiator.start(), readers[0])
    sides = ((responder, readers[1]), (initiator, readers[0]))
    turn = 0
    while data is not None:
        result.messages += 1
        result.bytes_total += len(data)
        result.largest_message = max(result.largest_message, len(data))
        session, reader = sides[turn]
        data = _sent(session, session.receive(data), reader)
        turn ^= 1
        _collect(initiator, result.initiator_missing, result.initiator_peer_missing)
        _collect(responder, result.responder_missing, result.responder_peer_missing)
    if not (initiator.done and responder.done):
        raise AssertionError("exchange stopped before both sessions finished")
    return result


def reconcile_in_memory(
    initiator_store: KeyStore,
    responder_store: KeyStore,
    initiator_interests: Iterable[tuple[bytes, bytes]],
    responder_interests: Iterable[tuple[bytes, bytes]],
    config: ReconConfig | None = None,
    *,
    apply: bool = True,
    readers: tuple[KeyReader | None, KeyReader | None] = (None, None),
) -> PairResult:
    """Reconcile two stores; with ``apply`` each side then inserts the keys it was missing
    (standing in for fetching and validating the events). ``readers``: see :func:`shuttle`."""
    result = shuttle(
        ReconSession.initiator(initiator_store, initiator_interests, config),
        ReconSession.responder(responder_store, responder_interests, config),
        readers,
    )
    if apply:
        for key in result.initiator_missing:
            initiator_store.insert(key)
        for key in result.responder_missing:
            responder_store.insert(key)
    return result
