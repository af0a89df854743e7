"""Full nodes inside the test's own process: the daemon's ``serve`` (real libp2p host on
127.0.0.1, real SQLite in the node's data dir, the real HTTP API) in one trio run per thread.

A node process costs its interpreter's start and the imports of the node, libp2p and the web
stack (seconds on a loaded 2-core machine) before it listens; a node here shares the test
process's imports and starts in a fraction of that, and several start at once. Tests about
processes (kill -9, signals, the CLI's ``run``, the emulated internet) keep ``NodeProcess``.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from pathlib import Path
from typing import Self

import trio

from node.cli.main import build_parser, run_overrides
from node.clock import Clock, SystemClock
from node.config.settings import Config, load_config
from node.daemon import serve
from node.datadir.api_token import read_token
from node.runtime import NodeInfo
from tests.harness.procs import NodeApi, start_all

__all__ = ["InProcessNode", "start_all"]

# Longest a stop waits for the node's services to finish and its database to close.
STOP_TIMEOUT_S = 60.0

_Started = NodeInfo | BaseException | None


class InProcessNode(NodeApi):
    """One node run by ``node.daemon.serve`` in a thread of this process, configured from
    the same ``syncnode run`` arguments and ``SYNCNODE_*`` variables a ``NodeProcess`` gets."""

    def __init__(self, data_dir: Path, *extra_args: str, config: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        super().__init__(data_dir, *extra_args, config=config, env=env)
        self._thread: threading.Thread | None = None
        self._started: queue.Queue[_Started] = queue.Queue()
        self._trio_token: trio.lowlevel.TrioToken | None = None
        self._shutdown = trio.Event()
        # Set once the thread's trio run can be reached (its token known).
        self._reachable = threading.Event()
        self.error: BaseException | None = None
        #: The node's one clock (node.clock), read at each start: a test may start the node
        #: again on another (tests.harness.clocks.AheadClock: as if it had been down longer).
        self.clock: Clock = SystemClock()

    def node_config(self) -> Config:
        argv = self.run_args()
        args = build_parser(argv).parse_args(argv)
        # Freezing is process-wide: an in-process node would freeze the test process, and the
        # objects of the nodes it stops later would never be collected.
        return load_config(args.config, env={"SYNCNODE_NODE_GC_FREEZE": "false", **os.environ,
                                             **self.env}, overrides=run_overrides(args))

    def launch(self) -> Self:
        """Start the node's thread; ``wait_started`` returns once its API answers."""
        config = self.node_config()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._started = queue.Queue()
        self._shutdown = trio.Event()
        self._reachable = threading.Event()
        self.error = None
        self._thread = threading.Thread(target=self._run, args=(config, self.clock),
                                        name=f"node {self.data_dir.name}", daemon=True)
        self._thread.start()
        return self

    def wait_started(self, timeout: float = 60.0) -> Self:
        try:
            got = self._started.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise RuntimeError(f"node {self.data_dir} did not start within {timeout} s") from None
        if not isinstance(got, NodeInfo):
            raise RuntimeError(f"node {self.data_dir} did not start") from got
        self.peer_id = got.peer_id
        self.listen_addrs = list(got.listen_addrs)
        self.api_url = got.api_url
        self.token = read_token(self.data_dir) or ""
        return self

    def _run(self, config: Config, clock: Clock) -> None:
        async def main() -> None:
            self._trio_token = trio.lowlevel.current_trio_token()
            self._reachable.set()
            async with trio.open_nursery() as nursery:
                info = await nursery.start(serve, config, self._shutdown, clock)
                self._started.put(info)

        try:
            trio.run(main)
        except BaseException as exc:  # the test reads it: from wait_started, or kill
            self.error = exc
            self._started.put(exc)
        else:
            self._started.put(None)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def kill(self) -> None:
        """Stop the node as a shutdown does (its services cancelled, the database closed)."""
        if not self.alive():
            return
        assert self._thread is not None
        if self._reachable.wait(STOP_TIMEOUT_S):
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._shutdown.set, trio_token=self._trio_token)
        self._thread.join(STOP_TIMEOUT_S)
        if self._thread.is_alive():
            raise RuntimeError(f"node {self.data_dir} did not stop within {STOP_TIMEOUT_S} s")

    def terminate(self, timeout: float = STOP_TIMEOUT_S) -> int:
        self.kill()
        return 0 if self.error is None else 1

    def log_tail(self, lines: int = 40) -> str:
        return f"(in-process node: its log is the test's captured log; error: {self.error!r})"

