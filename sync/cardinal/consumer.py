"""The Cardinal Streams consumer: messages in, chain events out (sans-IO).

Drive it with :meth:`Consumer.receive` (raw key and value, and the channel they came on) and read
:meth:`Consumer.events`. It needs no clock and no timers: everything is driven by messages and
by the chain head, so there is no ``handle_timer``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, cast

from sync.cardinal.assembly import Assembler, BlockMessage
from sync.cardinal.chain import ChainTracker
from sync.cardinal.codec import (
    DEFAULT_LIMITS,
    CardinalMessage,
    Limits,
    Reorg,
    ReorgComplete,
    decode_message,
)
from sync.cardinal.events import (
    BlockRef,
    ConsumerEvent,
    ConsumerStats,
    ReorgFinished,
    ReorgIgnored,
    ReorgStarted,
)
from sync.cardinal.payload import BlockPayload, payload_from_json, payload_to_json
from sync.errors import LocalProtocolError, RemoteProtocolError

__all__ = ["Consumer"]

_STATE_VERSION = 1
_MAX_REMEMBERED_REORGS = 64


def _compile_tracked(patterns: Sequence[str] | None) -> re.Pattern[str] | None:
    if patterns is None:
        return None
    try:
        return (
            re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else re.compile("(?!)")
        )
    except re.error as exc:
        raise LocalProtocolError(f"invalid tracked prefix regex: {exc}") from None


class Consumer:
    """Reassembles payloads, follows the heaviest chain and reports applied / reverted blocks.

    ``tracked``: regexes matched (``re.match``) against the keys of each Batch's updates map
    (prefixes, inline keys, sub batch names); entries nothing matches are ignored, and the
    consumer does not wait for their messages. None tracks everything.
    ``anchor``: the block already applied before this consumer starts (if its messages are
    replayed, its payload links the history below it); None starts from genesis (blocks whose
    parent is the zero hash).
    ``reorg_threshold``: reorgs up to this many blocks are followed from the block tree; state
    for blocks further behind the head is evicted (counted in :attr:`stats`).
    ``history_limit``: how many canonical refs below the tree are kept for deep Reorg messages;
    also how many blocks of head progress finished hashes are remembered (late copies dropped
    at once) and messages whose Batch never came are kept.
    ``max_early_messages``, ``max_blocks``: hard caps against floods (messages waiting for
    their Batch; blocks pending or held in the tree besides the canonical ones). Overflow evicts
    the oldest waiting messages / the block furthest ahead, and is counted in :attr:`stats`.
    """

    def __init__(
        self,
        *,
        tracked: Sequence[str] | None = None,
        anchor: BlockRef | None = None,
        reorg_threshold: int = 128,
        history_limit: int = 4096,
        limits: Limits = DEFAULT_LIMITS,
        max_early_messages: int = 200_000,
        max_blocks: int = 10_000,
    ) -> None:
        if reorg_threshold < 0 or history_limit < 1:
            raise LocalProtocolError("reorg_threshold must be >= 0 and history_limit >= 1")
        self.stats = ConsumerStats()
        self.limits = limits
        regex = _compile_tracked(tracked)
        tracked_fn = None if regex is None else (lambda key: regex.match(key) is not None)
        self._assembler = Assembler(
            self.stats, tracked_fn, max_early_messages, max_blocks, history_limit
        )
        self._chain = ChainTracker(self.stats, anchor, reorg_threshold, history_limit, max_blocks)
        self._events: list[ConsumerEvent] = []
        self._reorg_channel: str | None = None
        self._reorg_hash: bytes | None = None
        self._closed_channels: dict[str, None] = {}
        self._seen_reorgs: dict[bytes, None] = {}
        # The anchor's own messages are not ignored: replayed, its payload links the history
        # below it, where a heavier branch may fork (the reference's startup reorgs).
        self._sync_cutoff()

    # -----------------------------------------------------------------------------------------
    # input

    def receive(self, key: bytes, value: bytes, channel: str = "", peer: str | None = None) -> None:
        """One message from ``channel``. Malformed input raises RemoteProtocolError (only),
        naming ``peer`` so that the caller can count it against the sender."""
        try:
            msg = decode_message(key, value, self.limits)
        except RemoteProtocolError as exc:
            if peer is None:
                raise
            raise exc.from_peer(peer) from None
        self.receive_message(msg, channel, peer)

    def receive_message(
        self, msg: CardinalMessage, channel: str = "", peer: str | None = None
    ) -> None:
        """An already decoded message (e.g. from :func:`decode_message`). ``peer`` names the
        producer: sub batches are assembled per producer, so that redundant producers may
        chunk them differently."""
        stats = self.stats
        stats.messages += 1
        if channel in self._closed_channels:
            stats.ignored_closed_channel += 1
            return
        kind = type(msg)
        if kind is Reorg or kind is ReorgComplete:
            if kind is Reorg:
                self._on_reorg(cast(Reorg, msg), channel)
            else:
                self._on_reorg_complete(cast(ReorgComplete, msg), channel)
            return
        assembler = self._assembler
        block = assembler.add(cast(BlockMessage, msg), peer)
        if assembler.failures:
            self._events.extend(assembler.failures)
            assembler.failures.clear()
        if block is not None:
            self._add_block(block)

    def _add_block(self, block: BlockPayload) -> None:
        chain = self._chain
        before = chain.head
        chain.add(block)
        if chain.events:
            self._events.extend(chain.events)
            chain.events.clear()
        if chain.head != before:
            self._sync_cutoff()

    def _sync_cutoff(self) -> None:
        cutoff = self._chain.head.number - self._chain.reorg_threshold
        if cutoff > self._assembler.cutoff:
            self._assembler.evict_below(cutoff)

    def _on_reorg(self, msg: Reorg, channel: str) -> None:
        if msg.hash in self._seen_reorgs:
            # Redundant producers each announce the same reorg; follow it once.
            self.stats.duplicates += 1
            return
        self._seen_reorgs[msg.hash] = None
        if len(self._seen_reorgs) > _MAX_REMEMBERED_REORGS:
            del self._seen_reorgs[next(iter(self._seen_reorgs))]
        if not self._chain.reorg_to(msg.hash):
            self._events.append(ReorgIgnored(msg.hash, msg.number, channel, "unknown ancestor"))
            return
        # The new chain's blocks may have been seen (and dropped as too old) before: let the reorg
        # channel deliver them again; only the removed chain stays closed.
        self._assembler.reopen(self._chain.knows)
        self._events.append(ReorgStarted(msg.hash, msg.number, channel))
        self._events.extend(self._chain.events)
        self._chain.events.clear()
        # The rollback lowers the head, so blocks of the new chain must not count as too old.
        self._assembler.cutoff = self._chain.head.number - self._chain.reorg_threshold
        self._reorg_channel, self._reorg_hash = channel, msg.hash

    def _on_reorg_complete(self, msg: ReorgComplete, channel: str) -> None:
        if channel != self._reorg_channel or msg.hash != self._reorg_hash:
            self.stats.duplicates += 1
            return
        self._events.append(ReorgFinished(msg.hash, msg.number, channel))
        self._reorg_channel = self._reorg_hash = None
        if channel:
            self._closed_channels[channel] = None
            if len(self._closed_channels) > _MAX_REMEMBERED_REORGS:
                del self._closed_channels[next(iter(self._closed_channels))]

    # -----------------------------------------------------------------------------------------
    # output

    def events(self) -> list[ConsumerEvent]:
        """Events since the last call, oldest first."""
        events, self._events = self._events, []
        return events

    @property
    def head(self) -> BlockRef:
        return self._chain.head

    @property
    def reorg_threshold(self) -> int:
        return self._chain.reorg_threshold

    def canonical_blocks(self) -> list[BlockPayload]:
        """The retained canonical blocks (at most the threshold behind the head), oldest first."""
        return self._chain.canonical_blocks()

    def pending_count(self) -> int:
        """Blocks being reassembled plus complete blocks held in the tree."""
        return len(self._assembler) + len(self._chain)

    # -----------------------------------------------------------------------------------------
    # persistence

    def export_state(self) -> dict[str, Any]:
        """A JSON-able snapshot of the chain state: the history refs and the retained complete
        blocks. Partly reassembled blocks are not included (peers resend them)."""

        def ref(r: BlockRef) -> dict[str, Any]:
            return {"hash": "0x" + r.hash.hex(), "number": r.number, "weight": str(r.weight)}

        return {
            "version": _STATE_VERSION,
            "reorg_threshold": self._chain.reorg_threshold,
            "history": [ref(r) for r in self._chain.history()],
            "canonical": [b.hash.hex() for b in self._chain.canonical_blocks()],
            "blocks": [payload_to_json(b) for b in self._chain.retained_blocks()],
        }

    @classmethod
    def restore(cls, state: dict[str, Any], **options: Any) -> Consumer:
        """A consumer rebuilt from :meth:`export_state`; ``options`` as for the constructor
        (except ``anchor``). Raises RemoteProtocolError if the state is malformed."""
        try:
            if state["version"] != _STATE_VERSION:
                raise RemoteProtocolError(f"unsupported consumer state version {state['version']}")
            history = [
                BlockRef(bytes.fromhex(r["hash"][2:]), int(r["number"]), int(r["weight"]))
                for r in state["history"]
            ]
            blocks = [payload_from_json(b) for b in state["blocks"]]
            canonical = [bytes.fromhex(h) for h in state["canonical"]]
        except RemoteProtocolError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise RemoteProtocolError(f"malformed consumer state: {exc!r}") from None
        if not history:
            raise RemoteProtocolError("malformed consumer state: empty history")
        root = history[-1]
        consumer = cls(anchor=None if root.number < 0 else root, **options)
        chain = consumer._chain
        chain._history.clear()
        for r in history:
            chain._history[r.hash] = r
        by_hash = {b.hash: b for b in blocks}
        # Canonical blocks first, in chain order, then the side branches, linked without being
        # judged (the head rule depends on arrival order): this rebuilds the exported head.
        for block_hash in canonical:
            if block_hash in by_hash:
                consumer._add_block(by_hash.pop(block_hash))
        chain.quiet = True
        for block in sorted(by_hash.values(), key=lambda b: b.number):
            consumer._add_block(block)
        chain.quiet = False
        for block in blocks:
            consumer._assembler.closed[block.hash] = (block.number, None)
        consumer._events.clear()
        return consumer
