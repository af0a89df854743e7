"""The Recon reconciler: one sans-IO session per peer connection.

Each message is a run of ranges with one claim each (see :mod:`sync.recon.wire`). A receiver
answers every claim about a range on its own:

* HASH that matches ours: nothing more to do for that range;
* HASH that differs: if we hold at most ``key_list_threshold`` keys there we answer with our key
  list (KEYS); if at least half of our keys there cannot be the peer's (its count says so, the
  spec's case being a count of 0) and they are at most ``_LIST_ALL``, with all of them, in key
  lists of at most ``key_list_threshold``; otherwise we split the range at our own keys into
  ``f`` parts and send their hashes. ``f`` is at least ``fanout`` and grows so that a range of
  ``c`` keys reaches key-list size after ``split_levels`` messages:
  ``f = ceil((c / threshold) ** (1 / levels_left))``;
* KEYS: we now know both sides of the range: the keys listed that we lack are announced as
  :class:`MissingKeys`, ours that were not listed are sent back as DIFF and announced as
  :class:`PeerMissingKeys`;
* DIFF: announced as :class:`MissingKeys`; no answer.

Whatever does not fit into ``max_message_bytes`` waits for the next message (flag MORE). The
session ends when a message needs no answer. Interests: each side's first message states its
interest ranges; everything after runs over their intersection (the responder re-splits the parts
of the initiator's first ranges that fall inside it). Anything wrong from the peer raises
:class:`RemoteProtocolError`, ends the session and drops undrained events.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from typing import NoReturn, Protocol, TypeAlias, TypeVar, Union, cast

from sync.errors import ErrorKind, LocalProtocolError, RemoteProtocolError
from sync.recon.interests import Interests, clip, intersect, normalize, within
from sync.recon.reads import MAX_ROUNDS, KeyReads, KeysRead, ReadKeys
from sync.recon.store import KeyStore
from sync.recon.wire import (
    DIFF,
    HASH,
    KEYS,
    Item,
    Limits,
    Message,
    MessageWriter,
    decode_message,
    separator,
)

__all__ = [
    "PROTOCOL_ID",
    "Incoming",
    "MissingKeys",
    "PeerMissingKeys",
    "ReconConfig",
    "ReconEvent",
    "ReconFinished",
    "ReconSession",
    "Step",
]

# Not the spec's /ceramic/recon/1.0.0: our messages are a different, compact encoding.
PROTOCOL_ID = "/syncnode/recon/1.0.0"
_DIFF_CHUNK = 1024
_SMALL_SPLIT = 4096
_LIST_ALL = 1024
#: Ranges of one message whose handling may wait for reads at once: their reads are asked in
#: one round; more wait for the next (each waiting range holds a suspended run).
_WAITING = 4096
#: What :meth:`ReconSession._try` returns for a query that lacked a read.
_LACKED = object()


@dataclass(frozen=True, slots=True)
class ReconConfig:
    """Tuning and safety limits; both peers must agree on ``fingerprint_bytes``."""

    fanout: int = 16
    max_fanout: int = 256
    key_list_threshold: int = 8
    split_levels: int = 4
    fingerprint_bytes: int = 16
    max_message_bytes: int = 4 << 20
    # Ranges and keys one message may carry (both directions: sync.recon.wire.Limits).
    max_message_ranges: int = 262_144
    max_message_keys: int = 262_144
    max_key_bytes: int = 256
    # Keys one range may list (KEYS): an honest peer lists at most its key_list_threshold, so
    # anything longer is a peer inflating our "missing" set (a 600 KB message held 200,000).
    max_key_list: int = 256
    max_interests: int = 64
    max_messages: int = 1024
    max_bytes_received: int = 1 << 30
    # Queued answers; bounds the memory and CPU one message can make us spend (an honest
    # exchange of 1M keys with 10k differences on each side peaks at ~230k).
    max_pending_ranges: int = 1_000_000

    def __post_init__(self) -> None:
        if not 2 <= self.fanout <= self.max_fanout:
            raise LocalProtocolError("need 2 <= fanout <= max_fanout")
        if self.key_list_threshold < 1 or self.split_levels < 1:
            raise LocalProtocolError("key_list_threshold and split_levels must be >= 1")
        if self.max_key_list < self.key_list_threshold:
            raise LocalProtocolError("max_key_list must be >= key_list_threshold")
        if not 8 <= self.fingerprint_bytes <= 32:
            raise LocalProtocolError("fingerprint_bytes must be within 8..32")
        if self.max_message_bytes < 16 * (self.max_key_bytes + 16) + 1024:
            raise LocalProtocolError("max_message_bytes too small for max_key_bytes")
        # A split must fit one message, and so must the longest key list we accept.
        if self.max_message_ranges < 2 * self.max_fanout:
            raise LocalProtocolError("max_message_ranges must be >= 2 * max_fanout")
        if self.max_message_keys < max(self.max_key_list, 2048):
            raise LocalProtocolError("max_message_keys must be >= max_key_list and >= 2048")

    @property
    def limits(self) -> Limits:
        return Limits(
            self.max_message_bytes, self.max_key_bytes, self.max_interests, self.fingerprint_bytes,
            self.max_message_ranges, self.max_message_keys,
        )


@dataclass(frozen=True, slots=True)
class MissingKeys:
    """The peer has these keys and we lack them: fetch, validate, then insert them."""

    keys: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class PeerMissingKeys:
    """We have these keys and the peer lacks them (it learns them from us in this session)."""

    keys: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class ReconFinished:
    messages_sent: int
    messages_received: int
    bytes_sent: int
    bytes_received: int


ReconEvent = Union[MissingKeys, PeerMissingKeys, ReconFinished]  # noqa: UP007

#: What a step returns: a message to send (None: none), or the reads it must have first.
Step = Union[bytes, None, ReadKeys]  # noqa: UP007
_T = TypeVar("_T")
#: A step, or a part of one, that stops (yields) where it must have reads answered and goes on
#: from there once they are (``ReconSession.keys_read``); it returns its result.
_Run: TypeAlias = Generator[None, None, _T]


class _AskingStore(Protocol):
    """A key store that asks for its reads (``SummaryKeyStore``; sync/recon/reads.py)."""

    @property
    def misses(self) -> int: ...

    def wanted(self) -> KeyReads | None: ...

    def answer(self, answer: KeysRead) -> None: ...

    def forget_answers(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Incoming:
    """A message from the peer, decoded (:meth:`ReconSession.decode`), and its size."""

    message: Message
    nbytes: int


# Pending work, in key order: ("h", lo, hi, count, digest) | ("k", lo, hi, keys)
# | ("d", lo, hi, keys the peer listed, those of them we lack).
_Action = tuple[str, bytes, bytes, object, object]


class ReconSession:
    """One reconciliation with one peer; create with :meth:`initiator` or :meth:`responder`."""

    def __init__(
        self,
        store: KeyStore,
        interests: Iterable[tuple[bytes, bytes]],
        config: ReconConfig | None = None,
        *,
        initiator: bool,
        peer: str | None = None,
    ) -> None:
        self.store = store
        self.config = config or ReconConfig()
        self.interests = normalize(interests)
        if len(self.interests) > self.config.max_interests:
            raise LocalProtocolError("too many interest ranges")
        if any(len(b) > self.config.max_key_bytes for r in self.interests for b in r):
            raise LocalProtocolError("interest bound longer than max_key_bytes")
        header = MessageWriter(self.config.limits, self.interests)
        if header.room() < self.config.max_message_bytes // 2:
            raise LocalProtocolError("interests take more than half of max_message_bytes")
        self.is_initiator = initiator
        self.peer = peer
        self.common: Interests | None = None
        self.peer_interests: Interests | None = None
        self.done = False
        self.error: RemoteProtocolError | None = None
        self.messages_sent = self.messages_received = 0
        self.bytes_sent = self.bytes_received = 0
        self._limits = self.config.limits
        self._pending: list[_Action] = []
        self._events: list[ReconEvent] = []
        self._started = False
        self._sent_more = False
        self._hash_cache: dict[bytes, tuple[int, bytes]] = {}
        # What the store said it holds of the keys listed in the message being handled.
        self._held: set[bytes] | None = None
        self._listed: list[_Action] = []
        self._listed_dirty = False
        # A store that asks for its reads, and the step waiting for them (``ReadKeys``), where
        # it stopped: ``keys_read`` goes on with it.
        self._asks: _AskingStore | None = (
            cast(_AskingStore, store) if hasattr(store, "wanted") else None)
        self._asking: _Run[bytes | None] | None = None

    @classmethod
    def initiator(
        cls,
        store: KeyStore,
        interests: Iterable[tuple[bytes, bytes]],
        config: ReconConfig | None = None,
        *,
        peer: str | None = None,
    ) -> ReconSession:
        return cls(store, interests, config, initiator=True, peer=peer)

    @classmethod
    def responder(
        cls,
        store: KeyStore,
        interests: Iterable[tuple[bytes, bytes]],
        config: ReconConfig | None = None,
        *,
        peer: str | None = None,
    ) -> ReconSession:
        return cls(store, interests, config, initiator=False, peer=peer)

    # -- API ---------------------------------------------------------------------------------

    def start(self) -> bytes | ReadKeys:
        """The initiator's first message: its interests and the hashes of their first split.
        ``ReadKeys`` when an asking store lacks reads: see :meth:`keys_read`."""
        if not self.is_initiator or self._started:
            raise LocalProtocolError("start() is for a fresh initiator only")
        self._started = True
        step = self._step(self._start())
        assert step is not None  # the first message always exists
        return step

    def _start(self) -> _Run[bytes | None]:
        store = self.store
        counts = yield from self._gather([partial(store.count, lo, hi)
                                          for lo, hi in self.interests])
        yield from self._each(self._split(lo, hi, n, 1)
                              for (lo, hi), n in zip(self.interests, counts, strict=True))
        data, _ = yield from self._write()
        return data

    def decode(self, data: bytes) -> Incoming:
        """One message from the peer, decoded and checked but not acted on, for
        :meth:`receive`: a driver that charges the peer for the work a message asks
        (``sync.workbudget.recon_message_units``) decodes first, charges, then receives.
        A malformed message ends the session as :meth:`receive` would."""
        self._receivable()
        try:
            return self._decode(data)
        except RemoteProtocolError as exc:
            self._fail(exc)

    def receive(self, data: bytes | Incoming) -> Step:
        """Process one message from the peer (its bytes, or what :meth:`decode` made of
        them); returns the reply, or None when there is none. ``ReadKeys`` when an asking
        store lacks reads (sync/recon/reads.py): the step waits where it must read, and the
        driver makes the reads and hands them back through :meth:`keys_read`."""
        self._receivable()
        return self._step(self._receive(data))

    def _receivable(self) -> None:
        if self.done:
            raise LocalProtocolError("session is finished")
        if self.is_initiator and not self._started:
            raise LocalProtocolError("initiator must start() first")
        if self._asking is not None:
            raise LocalProtocolError("a step waits for its reads (keys_read)")

    def keys_read(self, answer: KeysRead) -> Step:
        """The reads the waiting step asked for (``ReadKeys``): it goes on from where it
        stopped, and returns as :meth:`start` or :meth:`receive` would have. It may ask again
        (a read that depends on an earlier one's result), in the same way."""
        run, self._asking = self._asking, None
        if run is None or self._asks is None:
            raise LocalProtocolError("no step waits for reads")
        self._asks.answer(answer)
        return self._step(run)

    def _step(self, run: _Run[bytes | None]) -> Step:
        """Advance ``run`` to its end, or to where it must have reads: it waits then (nothing
        is undone or done again), and the reads go out as ``ReadKeys``."""
        asks = self._asks
        try:
            run.send(None)
        except StopIteration as end:
            if asks is not None and asks.wanted() is not None:  # spends the step's answers
                raise LocalProtocolError("a step ended with reads it did not wait for") from None
            return cast("bytes | None", end.value)
        except BaseException as exc:
            if asks is not None:
                asks.forget_answers()
            if isinstance(exc, RemoteProtocolError):
                self._fail(exc)
            raise
        assert asks is not None  # only an asking store's reads make a run wait
        reads = asks.wanted()
        if reads is None:
            raise LocalProtocolError("a step waited for no read")
        self._asking = run
        return ReadKeys(reads)

    def _fail(self, exc: RemoteProtocolError) -> NoReturn:
        """The peer's protocol error ends the session and drops its events."""
        self.done = True
        self.error = exc.from_peer(self.peer)
        self._events.clear()
        self._pending.clear()
        raise self.error from None

    # -- reads -------------------------------------------------------------------------------

    def _gather(self, reads: Sequence[Callable[[], _T]]) -> _Run[list[_T]]:
        """The results of ``reads`` (queries of the store, nothing else), asked in one round:
        a query during which an asking store lacked a read returned nothing of use (its run
        was void), so it waits with the others that lacked and is made once they are
        answered; one that did not lack is not made again."""
        results: list[object] = [None] * len(reads)
        todo: Iterable[int] = range(len(reads))
        for _ in range(MAX_ROUNDS):
            lacking: list[int] = []
            for i in todo:
                if (value := self._try(reads[i])) is _LACKED:
                    lacking.append(i)
                else:
                    results[i] = value
            if not lacking:
                return cast(list[_T], results)
            todo = lacking
            yield
        raise LocalProtocolError(f"a read still lacked answers after {MAX_ROUNDS} rounds")

    def _read(self, read: Callable[..., _T], *args: object, lacked: bool = False) -> _Run[_T]:
        """``read(*args)`` (a query of the store), made again once answered while it lacks:
        :meth:`_gather` of one query, lean (a range's handling makes one or two). ``lacked``:
        the caller just tried it (:meth:`_try`), so the reads are asked for first."""
        if lacked:
            yield
        for _ in range(MAX_ROUNDS):
            if (value := self._try(read, *args)) is not _LACKED:
                return cast(_T, value)
            yield
        raise LocalProtocolError(f"a read still lacked answers after {MAX_ROUNDS} rounds")

    def _try(self, read: Callable[..., _T], *args: object) -> _T | object:
        """``read(*args)``, or ``_LACKED`` when the store lacked a read for it (what it
        returned was void). A handler tries its query at once and waits (:meth:`_read`) only
        when it lacked: most ranges' reads are at hand, and a run per query costs."""
        asks = self._asks
        if asks is None:
            return read(*args)
        before = asks.misses
        try:
            value = read(*args)
        except Exception:
            if asks.misses == before:
                raise
            return _LACKED
        return value if asks.misses == before else _LACKED

    def _each(self, works: Iterable[_Run[None]]) -> _Run[None]:
        """Run ``works`` (the handling of one range each) side by side: each runs until it
        must read; the reads of all that wait are asked in one round, and each goes on where
        it stopped once they are answered. At most ``_WAITING`` wait at a time."""
        left = iter(works)
        waiting: list[_Run[None]] = []
        more = True
        while True:
            while more and len(waiting) < _WAITING:
                work = next(left, None)
                if work is None:
                    more = False
                elif self._waits(work):
                    waiting.append(work)
            if not waiting:
                return
            yield
            waiting = [work for work in waiting if self._waits(work)]

    def _waits(self, work: _Run[None]) -> bool:
        """Advance ``work``; whether it waits for reads (False: it is done)."""
        try:
            work.send(None)
        except StopIteration:
            waits = False
        else:
            waits = True
        if len(self._pending) > self.config.max_pending_ranges:
            raise RemoteProtocolError("message asks for too much work", kind=ErrorKind.OVER_LIMIT)
        return waits

    def events(self) -> list[ReconEvent]:
        """Drain the events produced so far."""
        out, self._events = self._events, []
        return out

    # -- receiving ---------------------------------------------------------------------------

    def _decode(self, data: bytes) -> Incoming:
        # The session's budgets are checked before a byte is decoded.
        cfg = self.config
        if self.messages_received + 1 > cfg.max_messages:
            raise RemoteProtocolError("session round budget exceeded", kind=ErrorKind.OVER_LIMIT)
        if self.bytes_received + len(data) > cfg.max_bytes_received:
            raise RemoteProtocolError("session byte budget exceeded", kind=ErrorKind.OVER_LIMIT)
        return Incoming(decode_message(data, self._limits), len(data))

    def _receive(self, data: bytes | Incoming) -> _Run[bytes | None]:
        self._started = True
        incoming = self._decode(data) if isinstance(data, bytes) else data
        msg = incoming.message
        self.messages_received += 1
        self.bytes_received += incoming.nbytes
        first = self.messages_received == 1
        if first:
            if msg.interests is None:
                raise RemoteProtocolError("first message must state interests")
            # merge touching ranges, so that every range we accept lies inside one interval
            self.peer_interests = normalize(msg.interests)
            self.common = intersect(self.interests, self.peer_interests)
        elif msg.interests is not None:
            raise RemoteProtocolError("interests stated twice")
        common = self.common
        assert common is not None
        level = self.messages_sent + self.messages_received + 1
        if first and self.is_initiator and self._pending:
            yield from self._clip_pending(common)
        yield from self._prepare(msg.items)
        yield from self._each(self._works(msg.items, first and not self.is_initiator, common,
                                          level))
        # The peer waits for an answer to a HASH/KEYS/MORE, to our first message, or for the end
        # of what our last message announced as MORE (even if clipping left nothing to send).
        peer_waiting = msg.demanding or (first and not self.is_initiator) or self._sent_more
        if not (self._pending or peer_waiting):
            self._finish()
            return None
        out, demanding = yield from self._write()
        if not demanding and not msg.more:
            self._finish()
        return out

    def _works(self, items: tuple[Item, ...], reclip: bool, common: Interests, level: int
               ) -> Iterator[_Run[None]]:
        """The handling of each range of a message that has work to do (a matching hash has
        none), in order; a range the peer had no right to send ends the session here."""
        cache = self._hash_cache
        for item in items:
            if reclip:
                assert self.peer_interests is not None
                if item.kind == DIFF or not within(self.peer_interests, item.lo, item.hi):
                    raise RemoteProtocolError("first message range outside its interest")
                # Inside one common range (a bisection) is the usual case; clipping every
                # range of a 60,000-range message against each interest cost ~4 us apiece.
                if not within(common, item.lo, item.hi):
                    yield self._reclip(item, clip(item.lo, item.hi, common), level)
                    continue
            elif not within(common, item.lo, item.hi):
                raise RemoteProtocolError("range outside the common interest")
            if item.kind == HASH:
                cached = cache.pop(item.lo, None)
                if cached is None:  # not hashed with the others (a range sent twice)
                    yield self._on_hash(item, level)
                    continue
                count, digest = cached
                if count == item.count and digest[: len(item.fingerprint)] == item.fingerprint:
                    continue
                if self._lists_all(count, item.count):
                    yield self._list_all(item.lo, item.hi, count)
                else:
                    yield self._split(item.lo, item.hi, count, level)
            elif item.kind == KEYS:
                yield self._on_keys(item.lo, item.hi, item.keys)
            else:
                self._on_diff(item)

    def _on_hash(self, item: Item, level: int) -> _Run[None]:
        ((count, digest),) = yield from self._read(self._fingerprints, [item.lo, item.hi])
        if count != item.count or digest[: len(item.fingerprint)] != item.fingerprint:
            if self._lists_all(count, item.count):
                yield from self._list_all(item.lo, item.hi, count)
            else:
                yield from self._split(item.lo, item.hi, count, level)

    def _prepare(self, items: tuple[Item, ...]) -> _Run[None]:
        """What a message's ranges read first, in one round: the hashes of its HASH ranges
        (a run of adjacent ones together, each shared bound looked up once), and which of the
        keys it lists the store holds when it can tell in one lookup (one query on SQL)."""
        runs: list[list[bytes]] = []
        for item in items:
            if item.kind != HASH:
                continue
            if runs and runs[-1][-1] == item.lo:
                runs[-1].append(item.hi)
            else:
                runs.append([item.lo, item.hi])
        reads: list[Callable[[], object]] = [partial(self._fingerprints, run) for run in runs]
        batch: Callable[[list[bytes]], set[bytes]] | None = getattr(
            self.store, "contains_many", None)
        listed = ([k for item in items if item.kind != HASH for k in item.keys]
                  if batch is not None else [])
        if batch is not None and listed:
            reads.append(partial(batch, listed))
        got = yield from self._gather(reads)
        self._held = cast(set[bytes], got.pop()) if listed else None
        cache: dict[bytes, tuple[int, bytes]] = {}
        for run, values in zip(runs, got, strict=True):
            cache.update(zip(run, cast(list[tuple[int, bytes]], values), strict=False))
        self._hash_cache = cache

    def _has(self, key: bytes) -> bool:
        held = self._held
        return key in held if held is not None else self.store.contains(key)

    def _fingerprints(self, bounds: list[bytes]) -> list[tuple[int, bytes]]:
        """(count, digest) of adjacent ranges; a store may offer a faster batch for this."""
        batch = getattr(self.store, "range_fingerprints", None)
        if batch is not None:
            result: list[tuple[int, bytes]] = batch(bounds)
            return result
        hashes = (self.store.range_hash(lo, hi) for lo, hi in pairwise(bounds))
        return [(h.count, h.digest()) for h in hashes]

    def _reclip(self, item: Item, pieces: list[tuple[bytes, bytes]], level: int) -> _Run[None]:
        """Answer a first-message range that sticks out of the common interest, piece by piece."""
        for lo, hi in pieces:
            if item.kind == HASH:
                count = yield from self._read(self.store.count, lo, hi)
                yield from self._split(lo, hi, count, level)
            else:
                yield from self._on_keys(lo, hi, tuple(k for k in item.keys if lo <= k < hi))

    def _clip_pending(self, common: Interests) -> _Run[None]:
        """Our first message did not fit: keep only the parts of the rest inside ``common``."""
        kept: list[_Action] = []
        for action in self._pending:
            kind, lo, hi, extra, _ = action
            for p_lo, p_hi in clip(lo, hi, common):
                if (p_lo, p_hi) == (lo, hi):
                    kept.append(action)
                elif kind == "h":
                    ((count, digest),) = yield from self._read(self._fingerprints,
                                                               [p_lo, p_hi])
                    kept.append(("h", p_lo, p_hi, count, digest))
                else:
                    assert isinstance(extra, list)
                    kept.append(("k", p_lo, p_hi, [k for k in extra if p_lo <= k < p_hi], None))
        self._pending = kept

    def _on_keys(self, lo: bytes, hi: bytes, keys: tuple[bytes, ...]) -> _Run[None]:
        if len(keys) > self.config.max_key_list:
            raise RemoteProtocolError("key list over the limit", kind=ErrorKind.OVER_LIMIT)
        missing = frozenset(k for k in keys if not self._has(k))
        if missing:
            self._events.append(MissingKeys(tuple(k for k in keys if k in missing)))
        elif (yield from self._read(self.store.count, lo, hi)) <= len(keys):
            return
        self._pending.append(("d", lo, hi, keys, missing))

    def _on_diff(self, item: Item) -> None:
        """The peer's answer to our key list: its keys we lack, and which of ours it lacks."""
        missing = tuple(k for k in item.keys if not self._has(k))
        if missing:
            self._events.append(MissingKeys(missing))
        listed = self._listed_in(item.lo, item.hi)
        if len(item.lacking) != (len(listed) + 7) // 8:
            raise RemoteProtocolError("DIFF bitmap does not match our key list")
        bits = int.from_bytes(item.lacking, "little")
        if bits >> len(listed):
            raise RemoteProtocolError("DIFF bitmap has stray bits")
        lacking = tuple(k for i, k in enumerate(listed) if bits >> i & 1)
        if lacking:
            self._events.append(PeerMissingKeys(lacking))

    def _listed_in(self, lo: bytes, hi: bytes) -> list[bytes]:
        """Our keys of [lo, hi) from the KEYS item (sent earlier) that covers it."""
        if self._listed_dirty:
            self._listed.sort(key=_action_start)
            self._listed_dirty = False
        i = bisect_right(self._listed, lo, key=_action_start) - 1
        if i < 0 or self._listed[i][2] < hi:
            raise RemoteProtocolError("DIFF for a range we sent no key list for")
        keys = self._listed[i][3]
        assert isinstance(keys, list)
        return [k for k in keys if lo <= k < hi]

    def _lists_all(self, ours: int, theirs: int) -> bool:
        """Answer a differing range where we hold ``ours`` keys and the peer ``theirs`` with
        all our keys instead of a split? When at least half of ours cannot be the peer's
        (the spec's case is the peer holding none: "You sent 0 ... so they send all keys in
        that range"): those keys must reach the peer anyway, and a split would bring them
        back as key lists only a round trip or more later (a restarted peer's burst reached
        its peers in the fifth message instead of the third). Up to ``_LIST_ALL`` keys: a
        larger range is split first, so that one answer stays small."""
        return ours <= _LIST_ALL and 2 * (ours - theirs) >= ours

    def _leaf(self) -> int:
        # Aim below the threshold so that a leaf still fits a key list on the peer's side when
        # it holds a few keys more than we do; otherwise that leaf costs another round trip.
        return max(1, self.config.key_list_threshold // 2)

    def _parts(self, count: int, level: int) -> int:
        """How many parts a split of ``count`` keys at ``level`` makes: enough that a part
        reaches leaf size after ``split_levels`` messages."""
        cfg = self.config
        levels_left = max(1, cfg.split_levels + 1 - level)
        parts: int = math.ceil(float((count / self._leaf()) ** (1 / levels_left)))
        return min(max(parts, cfg.fanout), cfg.max_fanout, count)

    def _list_all(self, lo: bytes, hi: bytes, count: int) -> _Run[None]:
        """All our ``count`` keys of [lo, hi), in key lists of at most ``key_list_threshold``
        (what an honest peer lists)."""
        keys = yield from self._read(self.store.keys, lo, hi, count)
        size = self.config.key_list_threshold
        cuts = [separator(keys[i - 1], keys[i]) for i in range(size, len(keys), size)]
        for i, (a, b) in enumerate(pairwise([lo, *cuts, hi])):
            self._pending.append(("k", a, b, keys[i * size : (i + 1) * size], None))

    def _split(self, lo: bytes, hi: bytes, count: int, level: int) -> _Run[None]:
        """Queue the claims that answer a differing range [lo, hi) holding ``count`` of our keys."""
        cfg = self.config
        store = self.store
        if count <= cfg.key_list_threshold:
            if (keys := self._try(store.keys, lo, hi, count)) is _LACKED:
                keys = yield from self._read(store.keys, lo, hi, count, lacked=True)
            self._pending.append(("k", lo, hi, keys, None))
            return
        parts = self._parts(count, level)
        ranks = [i * count // parts for i in range(1, parts)]
        if count <= _SMALL_SPLIT:
            keys = yield from self._read(store.keys, lo, hi, count)
            cuts = [separator(keys[r - 1], keys[r]) for r in ranks]
        else:
            # one rank lookup per cut (an OFFSET query in SQL), then its successor by key order
            ats = yield from self._gather([partial(store.key_at, lo, hi, r - 1) for r in ranks])
            pairs = yield from self._gather([partial(store.keys, at, hi, 2) for at in ats])
            cuts = [separator(below, key) for below, key in pairs]
        bounds = [lo, *cuts, hi]
        hashes = yield from self._read(self._fingerprints, bounds)
        self._pending.extend(("h", a, b, n, digest) for a, b, (n, digest)
                             in zip(bounds, bounds[1:], hashes, strict=False))

    # -- sending -----------------------------------------------------------------------------

    def _write(self) -> _Run[tuple[bytes, bool]]:
        """Encode as much pending work as fits; returns (message, whether it needs an answer)."""
        writer = MessageWriter(self._limits, self.interests if self.messages_sent == 0 else None)
        pending = sorted(self._pending, key=_action_start)
        self._pending = []
        prev_hi = b""
        for i, action in enumerate(pending):
            kind, lo, hi, extra, extra2 = action
            if lo < prev_hi:
                raise RemoteProtocolError("peer made ranges overlap")
            prev_hi = hi
            if kind == "h":
                assert isinstance(extra, int) and isinstance(extra2, bytes)
                fits = writer.try_hash(lo, hi, extra, extra2)
            elif kind == "k":
                assert isinstance(extra, list)
                fits = writer.try_keys(KEYS, lo, hi, extra) is not None
                if fits:
                    self._listed.append(action)
                    self._listed_dirty = True
            else:
                assert isinstance(extra, tuple) and isinstance(extra2, frozenset)
                rest = yield from self._write_diff(writer, lo, hi, extra, extra2)
                fits = rest is None
                if rest is not None:
                    pending[i] = ("d", rest, hi, extra, extra2)
            if not fits:
                self._pending = pending[i:]
                break
        self._sent_more = bool(self._pending)
        data = writer.finish(more=self._sent_more)
        self.messages_sent += 1
        self.bytes_sent += len(data)
        return data, writer.demanding or bool(self._pending)

    def _write_diff(
        self,
        writer: MessageWriter,
        lo: bytes,
        hi: bytes,
        theirs: tuple[bytes, ...],
        lacking: frozenset[bytes],
    ) -> _Run[bytes | None]:
        """Answer the peer's key list of [lo, hi); returns where to resume when cut short."""
        store = self.store
        listed = frozenset(theirs)
        while True:
            batch = yield from self._read(store.keys, lo, hi, _DIFF_CHUNK + 1)
            end = hi if len(batch) <= _DIFF_CHUNK else separator(batch[-2], batch[-1])
            ours = [k for k in batch[:_DIFF_CHUNK] if k not in listed]
            if ours or any(lo <= k < end for k in lacking):
                written = writer.try_keys(DIFF, lo, end, ours, theirs, lacking)
                if written is None:
                    return lo
                if written:
                    self._events.append(PeerMissingKeys(tuple(ours[:written])))
                if written < len(ours):
                    return separator(ours[written - 1], ours[written])
            if end == hi:
                return None
            lo = end

    def _finish(self) -> None:
        self.done = True
        self._events.append(
            ReconFinished(
                self.messages_sent, self.messages_received, self.bytes_sent, self.bytes_received
            )
        )


def _action_start(action: _Action) -> bytes:
    return action[1]
