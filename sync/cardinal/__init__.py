"""Cardinal Streams (sans-IO): codecs, producer, consumer with chain head and reorgs.

See docs/cardinal.md for the wire format and the choices made where the spec is vague.
"""

from __future__ import annotations

from sync.cardinal.chain import GENESIS, ChainTracker
from sync.cardinal.codec import (
    BATCH_SCHEMA,
    DEFAULT_LIMITS,
    HASH_SIZE,
    SUBBATCH_SCHEMA,
    ZERO_HASH,
    Batch,
    BatchDeleteMsg,
    BatchMsg,
    CardinalMessage,
    Limits,
    MessageType,
    Reorg,
    ReorgComplete,
    SubBatchHeader,
    SubBatchMsg,
    decode_message,
    encode_message,
)
from sync.cardinal.consumer import Consumer
from sync.cardinal.envelope import (
    ENVELOPE_MESSAGE,
    ENVELOPE_REORG,
    MAX_REORG_CHANNEL,
    Envelope,
    decode_envelope,
    encode_envelope,
)
from sync.cardinal.events import (
    BlockApplied,
    BlockFailed,
    BlockRef,
    BlockReverted,
    ChainUpdated,
    ConsumerEvent,
    ConsumerStats,
    ReorgFinished,
    ReorgIgnored,
    ReorgStarted,
)
from sync.cardinal.golayout import encode_message_go
from sync.cardinal.payload import (
    BlockPayload,
    SubBatch,
    iter_payloads_jsonl,
    make_payload,
    make_sub_batch,
    payload_from_json,
    payload_to_json,
)
from sync.cardinal.producer import LAYOUTS, Producer, RoutedMessage, reorg_channel_name
from sync.cardinal.routing import DEFAULT_CHANNEL, PrefixRouter, prefix_to_channel

__all__ = [
    "BATCH_SCHEMA",
    "DEFAULT_CHANNEL",
    "DEFAULT_LIMITS",
    "ENVELOPE_MESSAGE",
    "ENVELOPE_REORG",
    "GENESIS",
    "HASH_SIZE",
    "LAYOUTS",
    "MAX_REORG_CHANNEL",
    "SUBBATCH_SCHEMA",
    "ZERO_HASH",
    "Batch",
    "BatchDeleteMsg",
    "BatchMsg",
    "BlockApplied",
    "BlockFailed",
    "BlockPayload",
    "BlockRef",
    "BlockReverted",
    "CardinalMessage",
    "ChainTracker",
    "ChainUpdated",
    "Consumer",
    "ConsumerEvent",
    "ConsumerStats",
    "Envelope",
    "Limits",
    "MessageType",
    "PrefixRouter",
    "Producer",
    "Reorg",
    "ReorgComplete",
    "ReorgFinished",
    "ReorgIgnored",
    "ReorgStarted",
    "RoutedMessage",
    "SubBatch",
    "SubBatchHeader",
    "SubBatchMsg",
    "decode_envelope",
    "decode_message",
    "encode_envelope",
    "encode_message",
    "encode_message_go",
    "iter_payloads_jsonl",
    "make_payload",
    "make_sub_batch",
    "payload_from_json",
    "payload_to_json",
    "prefix_to_channel",
    "reorg_channel_name",
]
