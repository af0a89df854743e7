"""Real ``syncnode run`` processes for end-to-end tests."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

import httpx

from node.datadir.api_token import TOKEN_ENV, read_token
from tests.conftest import ROOT


class NodeApi(ABC):
    """A running node as its tests reach it: its peer id, p2p addresses, HTTP API (with the
    token) and the CLI pointed at that API. ``NodeProcess`` runs the node in a process of its
    own, ``tests.harness.inproc.InProcessNode`` in this one; the cluster helpers take either."""

    def __init__(self, data_dir: Path, *extra_args: str, config: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.extra_args = list(extra_args)
        self.config = config
        self.env = env or {}
        self.peer_id = ""
        self.api_url = ""
        self.token = ""
        self.listen_addrs: list[str] = []
        self.listen = "/ip4/127.0.0.1/tcp/0"

    def run_args(self) -> list[str]:
        """``syncnode run``'s arguments for this node."""
        args = ["run", "--data-dir", str(self.data_dir), "--api", "127.0.0.1:0",
                "--listen", self.listen, *self.extra_args]
        if self.config is not None:
            args += ["--config", str(self.config)]
        return args

    def cli(
        self, *args: str, input: str | None = None, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.cli_command(*args),
            cwd=ROOT, capture_output=True, text=True, input=input, timeout=timeout,
            env=self.cli_env(),
        )

    def cli_command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "node.cli", *args, "--api", self.api_url]

    def cli_env(self) -> dict[str, str]:
        """The environment a CLI subprocess needs to reach this node (its API token)."""
        return {**os.environ, "PYTHONPATH": str(ROOT), TOKEN_ENV: self.token}

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self, timeout: float = 30) -> httpx.Client:
        """An HTTP client of this node's API that sends its token."""
        return httpx.Client(base_url=self.api_url, headers=self.headers, timeout=timeout)

    def get(self, path: str, **params: Any) -> Any:
        response = httpx.get(self.api_url + path, params=params, headers=self.headers, timeout=30)
        response.raise_for_status()
        if "json" in response.headers.get("content-type", ""):
            return response.json()
        return response.text

    def post(self, path: str, body: Any) -> Any:
        response = httpx.post(self.api_url + path, json=body, headers=self.headers, timeout=30)
        response.raise_for_status()
        return response.json()

    def status(self) -> dict[str, Any]:
        result = self.cli("status", "--json")
        assert result.returncode == 0, result.stderr
        return dict(json.loads(result.stdout))

    @abstractmethod
    def launch(self) -> Self:
        """Start the node without waiting for it; ``wait_started`` returns once it listens."""

    @abstractmethod
    def wait_started(self, timeout: float = 60.0) -> Self:
        """Wait until the launched node listens and its API answers (its ids then known)."""

    def start(self, timeout: float = 60.0) -> Self:
        return self.launch().wait_started(timeout)

    @abstractmethod
    def kill(self) -> None:
        """Stop the node (a process: SIGKILL; in-process: a clean shutdown)."""


Node = TypeVar("Node", bound=NodeApi)


def start_all(nodes: Sequence[Node], timeout: float = 60.0) -> list[Node]:
    """Start ``nodes`` at once and return them once every one listens: node processes pay
    their interpreter's start and imports side by side (on both cores), not one after the
    other. One that fails to start stops them all."""
    try:
        for node in nodes:
            node.launch()
        return [node.wait_started(timeout) for node in nodes]
    except BaseException:
        for node in nodes:  # none left running: the caller's clean-up never got them
            node.kill()
        raise


class NodeProcess(NodeApi):
    """One node in its own process, on loopback, with a private data dir and free ports."""

    def __init__(self, data_dir: Path, *extra_args: str, config: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        super().__init__(data_dir, *extra_args, config=config, env=env)
        self.proc: subprocess.Popen[str] | None = None
        self.stderr_path = data_dir / "node.log"
        self.answered_ms = 0  # when its API last came up (epoch ms): a restart's return
        self._lines: queue.Queue[str | None] = queue.Queue()
        # Subclasses run the node elsewhere (tests.net.nodes: inside a network namespace).
        self.wrap: list[str] = []

    def launch(self) -> Self:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [*self.wrap, sys.executable, "-m", "node.cli", *self.run_args()]
        stderr = self.stderr_path.open("a")
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True,
            # SYNCNODE_DEBUG: a node that dies of a bug leaves its traceback in its log (the
            # CLI otherwise prints one line), so a failed run says where it broke.
            env={**os.environ, "PYTHONPATH": str(ROOT), "SYNCNODE_DEBUG": "1", **self.env},
        )
        stderr.close()
        # A restart must not read the previous process's lines (nor its end marker).
        self._lines = queue.Queue()
        threading.Thread(target=self._pump, args=(self.proc, self._lines), daemon=True).start()
        self.listen_addrs = []
        return self

    def wait_started(self, timeout: float = 60.0) -> Self:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self._lines.get(timeout=max(remaining, 0.01))
            except queue.Empty:
                line = None
            if line is None:
                self.kill()
                raise RuntimeError(f"node did not start; log:\n{self.log_tail()}")
            if line.startswith("peer id:"):
                self.peer_id = line.split()[-1]
            elif line.startswith("listening:"):
                self.listen_addrs.append(line.split()[-1])
            elif line.startswith("api:"):
                self.api_url = line.split()[-1]
                self.token = read_token(self.data_dir) or ""
                self.answered_ms = int(time.time() * 1000)
                return self

    @staticmethod
    def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.stderr_path.read_text().splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def terminate(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def running_node(base: Path, env: dict[str, str] | None = None, *,
                 in_process: bool = False) -> Iterator[NodeApi]:
    """A started node for a fixture to yield (``in_process``: in this process,
    tests.harness.inproc); stopped when the fixture is torn down."""
    from tests.harness.inproc import InProcessNode  # it builds on this module

    runner = InProcessNode if in_process else NodeProcess
    node = runner(base / "n", env=env).start()
    try:
        yield node
    finally:
        node.kill()
