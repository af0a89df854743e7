"""Real ``syncnode run`` processes inside network namespaces, reached through a Unix socket.

A node's API listens on its namespace's loopback (``127.0.0.1``), which the test process (in
the root namespace) cannot reach. :class:`ApiBridge` closes that gap without routing anything:
a thread of the test process enters the namespace (``setns``), and forwards connections made
to a Unix socket (a file, visible from every namespace) to ``127.0.0.1:<port>`` there. httpx
talks to it with ``HTTPTransport(uds=...)``; the CLI runs under ``ip netns exec``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any, Self

import httpx

from tests.harness.procs import NodeProcess
from tests.net.netns import Host

__all__ = ["ApiBridge", "NetNode", "enter_namespace"]

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def enter_namespace(ns: str) -> None:
    """Move the calling thread (only it) into network namespace ``ns``."""
    fd = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
    try:
        if _libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({ns}): {os.strerror(err)}")
    finally:
        os.close(fd)


class ApiBridge:
    """Unix socket ``path`` -> ``127.0.0.1:port`` inside namespace ``ns``."""

    def __init__(self, ns: str, port: int, path: Path) -> None:
        self.ns, self.port, self.path = ns, port, path
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(64)
        self._closed = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        # This thread, and the threads it starts, live in the node's namespace.
        enter_namespace(self.ns)
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe_pair, args=(client,), daemon=True).start()

    def _pipe_pair(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        except OSError:
            client.close()
            return
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
        _pipe(client, upstream)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            src.close()


class NetNode(NodeProcess):
    """A node process in ``host``'s namespace, listening on ``host.ip:port``."""

    def __init__(self, host: Host, data_dir: Path, *extra_args: str, port: int = 4001,
                 env: dict[str, str] | None = None, wildcard: bool = False) -> None:
        """``wildcard``: listen on ``0.0.0.0`` (what config.example.toml tells a user to
        write), not on the host's own address."""
        super().__init__(data_dir, *extra_args, env=env)
        self.host = host
        self.port = port
        self.wrap = ["ip", "netns", "exec", host.ns]
        self.listen = f"/ip4/{'0.0.0.0' if wildcard else host.ip}/tcp/{port}"
        self.bridge: ApiBridge | None = None

    def wait_started(self, timeout: float = 60.0) -> Self:
        super().wait_started(timeout)
        if self.bridge is not None:
            self.bridge.close()
        port = int(self.api_url.rsplit(":", 1)[1].strip("/"))
        self.bridge = ApiBridge(self.host.ns, port, self.data_dir / "api.sock")
        return self

    @property
    def address(self) -> str:
        """The multiaddr others join: the host's address and listen port with its peer id."""
        return f"/ip4/{self.host.ip}/tcp/{self.port}/p2p/{self.peer_id}"

    def client(self, timeout: float = 30) -> httpx.Client:
        assert self.bridge is not None, "node not started"
        return httpx.Client(base_url=self.api_url, headers=self.headers, timeout=timeout,
                            transport=httpx.HTTPTransport(uds=str(self.bridge.path)))

    def get(self, path: str, **params: Any) -> Any:
        with self.client() as client:
            response = client.get(path, params=params)
        response.raise_for_status()
        if "json" in response.headers.get("content-type", ""):
            return response.json()
        return response.text

    def post(self, path: str, body: Any) -> Any:
        with self.client() as client:
            response = client.post(path, json=body)
        response.raise_for_status()
        return response.json()

    def join(self, address: str) -> str:
        """``syncnode join`` through the API (no CLI process to start): the joined peer id."""
        return str(self.post("/v1/peers", {"multiaddr": address})["peer_id"])

    def cli_command(self, *args: str) -> list[str]:
        return [*self.wrap, sys.executable, "-m", "node.cli", *args, "--api", self.api_url]

    def kill(self) -> None:
        super().kill()
        if self.bridge is not None:
            self.bridge.close()
            self.bridge = None
