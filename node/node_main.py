"""``syncnode run``'s process: signals, the start-up banner, and start-up errors as one line."""

from __future__ import annotations

import errno
import signal

import trio

from node.clock import SystemClock
from node.config.fields import ConfigError
from node.config.settings import Config
from node.daemon import StartupError, serve
from node.leaves import leaf_exceptions
from node.p2p.frames import P2PError
from node.p2p.identity import IdentityError
from node.runtime import package_version

__all__ = ["run_node", "startup_problem"]


async def run_node(config: Config) -> int:
    shutdown = trio.Event()

    async def watch_signals() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                shutdown.set()
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_signals)
        # The process's one clock: trio's for now(), the system's for wall() (node.clock).
        info = await nursery.start(serve, config, shutdown, SystemClock())
        print(f"syncnode {package_version()} running", flush=True)
        print(f"peer id:   {info.peer_id}")
        for addr in info.listen_addrs:
            print(f"listening: {addr}")
        print(f"api:       {info.api_url}", flush=True)
        await shutdown.wait()
        nursery.cancel_scope.cancel()
    print("stopped", flush=True)
    return 0


def startup_problem(error: BaseException) -> str | None:
    """The one-line reason when ``error`` (often a group) means the node could not start."""
    for leaf in leaf_exceptions(error):
        if isinstance(leaf, StartupError | IdentityError | ConfigError):
            return str(leaf)
        if isinstance(leaf, OSError) and leaf.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
            return (f"cannot listen: {leaf.strerror} (is api.listen or p2p.listen taken by "
                    "another process?)")
        if isinstance(leaf, P2PError):
            return f"p2p: {leaf}"
    return None

