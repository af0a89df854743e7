"""Framed streams of a :class:`node.p2p.host.P2PHost`: protocol handlers, opening, ping.

Every stream is handed out as a :class:`node.p2p.frames.FramedStream` (length-prefixed frames
with timeouts, counted in the host's stats). A handler's stream is closed when it returns and
reset when it raises; its exceptions are logged and counted and never reach libp2p.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable

import trio
from libp2p.abc import IHost, INetStream
from libp2p.custom_types import TProtocol
from libp2p.host.ping import ID as PING_PROTOCOL_ID
from libp2p.peer.id import ID

from node.clock import Clock
from node.p2p.frames import (
    FramedStream,
    FrameError,
    P2PError,
    P2PTimeoutError,
    StreamOpenError,
)
from node.p2p.types import BanList, P2PConfig, P2PStats

__all__ = ["StreamHandler", "Streams"]

logger = logging.getLogger("node.p2p")

StreamHandler = Callable[[FramedStream], Awaitable[None]]
_PING_BYTES = 32


class Streams:
    """The host's stream protocols; ``connected(peer)`` says whether a peer is connected."""

    def __init__(self, *, host: IHost, config: P2PConfig, stats: P2PStats, bans: BanList,
                 connected: Callable[[str], bool],
                 clock: Clock, spoke: Callable[[str], None] | None = None) -> None:
        self._host = host
        self.clock = clock
        self.config = config
        self.stats = stats
        self.bans = bans
        self._connected = connected
        # Told of each peer that opened, or answered, a stream of one of our protocols.
        self._spoke = spoke or (lambda _peer: None)

    def set_handler(self, protocol_id: str, handler: StreamHandler) -> None:
        """Serve ``protocol_id``: each inbound stream runs ``handler(FramedStream)``.

        The stream is closed when the handler returns and reset if it raises. An exception is
        logged and counted in ``stats.handler_errors``; it never reaches libp2p or the host.
        """

        async def run_handler(raw: INetStream) -> None:
            framed = self._wrap(raw, protocol_id)
            if self.bans.is_banned(framed.peer_id):
                # The stream raced the disconnect that came with the ban.
                self.stats.refused_banned += 1
                await framed.reset()
                return
            self.stats.streams_accepted += 1
            self._spoke(framed.peer_id)
            completed = False
            try:
                await handler(framed)
                completed = True
            except FrameError as exc:  # already counted in frame_errors; the peer's fault
                self.stats.handler_errors += 1
                logger.warning("handler %s: %s", protocol_id, exc)
            except P2PError as exc:  # timeouts, resets: ordinary network weather
                self.stats.handler_errors += 1
                logger.info("handler %s for %s ended: %s", protocol_id, framed.peer_id, exc)
            except Exception:  # a bug in the handler: loud, but the host keeps serving
                self.stats.handler_errors += 1
                logger.exception("handler %s for %s raised", protocol_id, framed.peer_id)
            finally:
                # Also on cancellation: the stream slot is released on every path.
                if completed:
                    await framed.close()
                else:
                    await framed.reset()

        self._host.set_stream_handler(TProtocol(protocol_id), run_handler)

    def remove_handler(self, protocol_id: str) -> None:
        self._host.remove_stream_handler(TProtocol(protocol_id))

    async def open(self, peer_id: str, protocol_id: str) -> FramedStream:
        """Open a framed stream to a connected peer; use it with ``async with``.

        :raises StreamOpenError: not connected, protocol refused, or ``stream_open_timeout``.
        """
        raw = await self.open_raw(peer_id, TProtocol(protocol_id))
        self.stats.streams_opened += 1
        self._spoke(peer_id)
        return self._wrap(raw, protocol_id)

    async def open_raw(self, peer_id: str, protocol_id: TProtocol) -> INetStream:
        """A raw libp2p stream (no framing): ping, and tests that write bytes as they like."""
        if not self._connected(peer_id):
            self.stats.stream_open_failures += 1
            raise StreamOpenError(f"not connected to {peer_id}")
        try:
            with trio.fail_after(self.config.stream_open_timeout):
                return await self._host.new_stream(ID.from_base58(peer_id), [protocol_id])
        except trio.TooSlowError as exc:
            self.stats.stream_open_failures += 1
            raise StreamOpenError(
                f"opening {protocol_id} to {peer_id} timed out after "
                f"{self.config.stream_open_timeout}s"
            ) from exc
        except Exception as exc:
            self.stats.stream_open_failures += 1
            raise StreamOpenError(f"opening {protocol_id} to {peer_id} failed: {exc}") from exc

    def _wrap(self, raw: INetStream, protocol_id: str) -> FramedStream:
        def count_frame_error() -> None:
            self.stats.frame_errors += 1

        def count_timeout() -> None:
            self.stats.timeouts += 1

        return FramedStream(
            raw,
            peer_id=raw.muxed_conn.peer_id.to_base58(),
            protocol_id=protocol_id,
            max_frame_bytes=self.config.max_frame_bytes,
            read_timeout=self.config.read_timeout,
            write_timeout=self.config.write_timeout,
            on_frame_error=count_frame_error,
            on_timeout=count_timeout,
        )

    async def ping(self, peer_id: str) -> float:
        """Round-trip time to a connected peer with libp2p's ping protocol, in seconds."""
        payload = os.urandom(_PING_BYTES)
        stream = await self.open_raw(peer_id, PING_PROTOCOL_ID)
        try:
            with trio.fail_after(self.config.stream_open_timeout):
                start = self.clock.now()
                await stream.write(payload)
                echoed = b""
                while len(echoed) < _PING_BYTES:
                    chunk = await stream.read(_PING_BYTES - len(echoed))
                    if not chunk:
                        raise P2PError(f"ping stream to {peer_id} closed early")
                    echoed += chunk
                rtt = self.clock.now() - start
        except trio.TooSlowError as exc:
            raise P2PTimeoutError(f"ping to {peer_id} timed out") from exc
        except P2PError:
            raise
        except Exception as exc:
            raise P2PError(f"ping to {peer_id} failed: {exc!r}") from exc
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                try:
                    await stream.close()
                except Exception:
                    logger.debug("closing ping stream failed", exc_info=True)
        if echoed != payload:
            raise P2PError(f"ping reply from {peer_id} does not match")
        return rtt
