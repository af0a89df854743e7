"""Producer: a block payload becomes a Batch plus the messages it announces.

Stateless and deterministic: two producers with the same :class:`PrefixRouter` and chunk size
emit byte-identical messages for the same payload (sorted keys, sorted Avro maps, fixed chunking),
which is what lets consumers discard the copies of redundant producers as duplicates.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from sync.cardinal.codec import (
    DEFAULT_LIMITS,
    Batch,
    BatchDeleteMsg,
    BatchMsg,
    CardinalMessage,
    Limits,
    Reorg,
    ReorgComplete,
    SubBatchHeader,
    SubBatchMsg,
    encode_message,
)
from sync.cardinal.golayout import encode_message_go, go_sub_batch_messages
from sync.cardinal.payload import BlockPayload, SubBatch
from sync.cardinal.routing import PrefixRouter
from sync.errors import LocalProtocolError

__all__ = ["LAYOUTS", "Producer", "RoutedMessage", "reorg_channel_name"]

# "syncnode": sub batches in chunks of ``subbatch_chunk`` (deletes, then updates); "go": the Go
# reference's layout (sync.cardinal.golayout), for consumers built on the reference.
LAYOUTS = ("syncnode", "go")


@dataclass(frozen=True, slots=True)
class RoutedMessage:
    """One wire message and the channel (the spec's topic) it is to be published on."""

    channel: str
    key: bytes
    value: bytes


def reorg_channel_name(default_channel: str, ancestor: bytes) -> str:
    """The dedicated in-order channel of a deep reorg back to ``ancestor``."""
    return f"{default_channel}/reorg/{ancestor.hex()}"


class Producer:
    """Splits payloads into Cardinal messages routed by the application's prefix table."""

    def __init__(
        self,
        router: PrefixRouter,
        *,
        subbatch_chunk: int = 64,
        limits: Limits = DEFAULT_LIMITS,
        layout: str = "syncnode",
    ) -> None:
        if subbatch_chunk < 1:
            raise LocalProtocolError("subbatch_chunk must be at least 1")
        if layout not in LAYOUTS:
            raise LocalProtocolError(f"unknown producer layout {layout!r}")
        self.layout = layout
        self._encode = encode_message_go if layout == "go" else encode_message
        self.router = router
        self.subbatch_chunk = subbatch_chunk
        # Refuse what consumers with these limits would reject, rather than publish it.
        self.limits = limits

    def messages_for(self, payload: BlockPayload) -> list[RoutedMessage]:
        """Every message of ``payload``, sorted by key (so the Batch comes first)."""
        block = payload.hash
        out: list[tuple[str, CardinalMessage]] = []
        values: dict[str, bytes] = {}
        deletes: set[str] = set()
        counts: dict[str, int] = {}
        route = self.router.route
        for key, value in payload.updates:
            prefix, channel = route(key)
            if prefix is None:
                values[key] = value
            else:
                counts[prefix] = counts.get(prefix, 0) + 1
                out.append((channel, BatchMsg(block, key, value)))
        for key in payload.deletes:
            prefix, channel = route(key)
            if prefix is None:
                if key in values:
                    raise LocalProtocolError(f"inline key {key!r} is both updated and deleted")
                deletes.add(key)
            else:
                counts[prefix] = counts.get(prefix, 0) + 1
                out.append((channel, BatchDeleteMsg(block, key)))
        prefixes = sorted(counts)
        for shorter, longer in itertools.pairwise(prefixes):
            if longer.startswith(shorter):
                raise LocalProtocolError(f"application prefixes overlap: {shorter!r}, {longer!r}")
        for sub in payload.sub_batches:
            out.extend(self._sub_batch_messages(block, sub))
        batch = Batch(
            block,
            payload.number,
            payload.weight,
            payload.parent,
            values,
            frozenset(deletes),
            counts,
            {sub.name: sub.id for sub in payload.sub_batches},
        )
        out.append((self.router.default_channel, batch))
        limits = self.limits
        if len(batch.values) + len(batch.deletes) + len(counts) + len(batch.subbatches) > (
            limits.max_batch_entries
        ):
            raise LocalProtocolError("too many Batch entries for the decode limits")
        if any(c > limits.max_count for c in counts.values()):
            raise LocalProtocolError("too many messages under one prefix for the decode limits")
        routed = []
        for channel, msg in out:
            wire_key, wire_value = self._encode(msg)
            if len(wire_key) > limits.max_key or len(wire_value) > limits.max_value:
                raise LocalProtocolError(
                    f"message of {len(wire_key)}-byte key, {len(wire_value)}-byte value "
                    "exceeds the decode limits"
                )
            routed.append(RoutedMessage(channel, wire_key, wire_value))
        routed.sort(key=lambda m: m.key)
        return routed

    def _sub_batch_messages(self, block: bytes, sub: SubBatch) -> list[tuple[str, CardinalMessage]]:
        channel = self.router.channel_of(sub.name)
        if self.layout == "go":
            go_items = go_sub_batch_messages(block, sub)
            if len(go_items) - 1 > self.limits.max_subbatch_items:
                raise LocalProtocolError(f"sub batch {sub.name!r} has too many items")
            return [(channel, msg) for msg in go_items]
        step = self.subbatch_chunk
        chunks: list[SubBatchMsg] = []
        if (len(sub.deletes) + step - 1) // step + (len(sub.updates) + step - 1) // step > (
            self.limits.max_subbatch_items
        ):
            raise LocalProtocolError(f"sub batch {sub.name!r} has too many items")
        for start in range(0, len(sub.deletes), step):
            chunk = sub.deletes[start : start + step]
            chunks.append(SubBatchMsg(block, sub.id, len(chunks), chunk, {}))
        for start in range(0, len(sub.updates), step):
            chunk_updates = dict(sub.updates[start : start + step])
            chunks.append(SubBatchMsg(block, sub.id, len(chunks), (), chunk_updates))
        header = SubBatchHeader(block, sub.id, len(chunks))
        return [(channel, header), *((channel, msg) for msg in chunks)]

    def reorg_messages(
        self, ancestor: bytes, ancestor_number: int, blocks: Sequence[BlockPayload]
    ) -> list[RoutedMessage]:
        """A deep reorg: Reorg, the new chain's blocks in order, ReorgComplete, all on one channel.

        The transport must deliver this list in order on that channel.
        """
        channel = reorg_channel_name(self.router.default_channel, ancestor)
        result = [RoutedMessage(channel, *encode_message(Reorg(ancestor, ancestor_number)))]
        for payload in blocks:
            result.extend(
                RoutedMessage(channel, m.key, m.value) for m in self.messages_for(payload)
            )
        done = ReorgComplete(ancestor, ancestor_number)
        result.append(RoutedMessage(channel, *encode_message(done)))
        return result
