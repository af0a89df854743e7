"""The pubsub receive loop of py-libp2p 0.8.1 without a task per message (entry P8 of the
table in ``node.p2p.compat``).

0.8.1's ``Pubsub.continuously_read_stream`` spawns a service task (``manager.run_task``)
for every message of every RPC read, and builds a metrics event (``peer_id.pretty()``, a
base58 encoding) for every RPC whether or not the host has a metrics channel. A task costs a
spawn, a scheduler pass and the manager's bookkeeping per message, and nothing bounds how
many are pending: a peer sending faster than they finish piles them up.

:class:`InlineReceive` reads the same way (the length prefix and the size bound through the
pubsub module's own ``read_varint_prefixed_bytes_limited``, looked up at call time, the
sender's record through ``maybe_consume_signed_record``, the subscription limits) and pushes
each message in the reader's own task: the next RPC of that peer is read once the last one
is handled, so a fast peer is held back by its own stream (Yamux's window, then TCP) instead
of by a growing set of tasks. ``push_msg`` with synchronous validators (ours) does not block:
forwarding only queues RPCs (``send_rpc``). The metrics event is built only for a host that
has a metrics channel.
"""

from __future__ import annotations

import contextlib
import logging

import libp2p.pubsub.pubsub as _pubsub_module
from libp2p.abc import INetStream
from libp2p.io.exceptions import IOException, MessageTooLarge
from libp2p.network.connection.exceptions import RawConnError
from libp2p.network.stream.exceptions import StreamEOF, StreamError
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import GossipsubEvent, Pubsub

__all__ = ["InlineReceive"]

logger = logging.getLogger("libp2p.pubsub.pubsub")

class InlineReceive(Pubsub):
    """``Pubsub`` whose reader handles each received message itself (no task per message)."""

    async def continuously_read_stream(self, stream: INetStream) -> None:
        peer_id = stream.muxed_conn.peer_id
        # Looked up at call time: a replacement set on libp2p's module (R1) applies here too.
        names = vars(_pubsub_module)
        read, consume_record = (names["read_varint_prefixed_bytes_limited"],
                                names["maybe_consume_signed_record"])
        try:
            while self.manager.is_running:
                incoming: bytes = await read(
                    stream, self.max_inbound_rpc_size)
                rpc = rpc_pb2.RPC()
                rpc.ParseFromString(incoming)
                if not consume_record(rpc, self.host, peer_id):
                    logger.error("Received an invalid-signed-record, ignoring the incoming msg")
                    continue
                for msg in rpc.publish:
                    if self.manager.is_running and self._is_subscribed_to_msg(msg):
                        await self.push_msg(peer_id, msg)
                if rpc.subscriptions:
                    if len(rpc.subscriptions) > self.max_subscriptions_per_rpc:
                        logger.warning("Peer %s sent %d subscriptions exceeding limit %d, "
                                       "rejecting subscriptions", peer_id,
                                       len(rpc.subscriptions), self.max_subscriptions_per_rpc)
                    else:
                        for sub in rpc.subscriptions:
                            self.handle_subscription(peer_id, sub)
                if rpc.HasField("control"):
                    await self.router.handle_rpc(rpc, peer_id)
                if stream.metric_send_channel is not None:
                    await stream.metric_send_channel.send(_event(peer_id.pretty(), rpc,
                                                                 len(incoming)))
        except MessageTooLarge as error:
            logger.warning("Inbound pubsub RPC from peer %s exceeded size limit: %s", peer_id,
                           error)
            with contextlib.suppress(Exception):
                await stream.reset()
            self._handle_dead_peer(peer_id)
        except (StreamEOF, StreamError, IOException, RawConnError) as error:
            logger.debug("pubsub stream of %s ended: %r", peer_id, error)


def _event(peer: str, rpc: rpc_pb2.RPC, size: int) -> GossipsubEvent:
    event = GossipsubEvent()
    event.peer_id = peer
    event.message_size = size
    event.publish = bool(rpc.publish)
    event.subopts = bool(rpc.subscriptions)
    event.control = rpc.HasField("control")
    return event
