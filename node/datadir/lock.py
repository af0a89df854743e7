"""One process per data dir: an exclusive ``repo.lock`` in it, as kubo does.

``syncnode run`` holds the lock while it runs; ``snapshot pull`` and ``bootstrap`` take it too,
since they write the database directly. The lock is an ``flock`` on the file, so the kernel
releases it when the holder dies (no stale lock after a crash); the file holds the holder's PID
only so that the error can name it.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from types import TracebackType

__all__ = ["LOCK_NAME", "DataDirLocked", "RepoLock", "stale_holder"]

LOCK_NAME = "repo.lock"


class DataDirLocked(RuntimeError):
    """Another process holds the data dir."""


def _read_pid(fd: int) -> int | None:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 32).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def stale_holder(data_dir: Path) -> int | None:
    """The PID a crashed holder left in ``data_dir``'s lock (None: the lock names a live
    process, nobody, or there is no lock). A clean stop empties the file; a ``kill -9`` leaves
    the PID, whose process is then gone (or a zombie). Read without locking: a client taking
    the lock, even for a moment, could make a node starting then fail with "in use"."""
    try:
        with (data_dir / LOCK_NAME).open("rb") as f:
            text = f.read(32).decode("ascii", "replace").strip()
    except OSError:
        return None
    if not text.isdigit():
        return None
    pid = int(text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return pid
    except PermissionError:
        return None  # another user's live process
    try:  # a killed process its parent has not reaped yet is gone too
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[:1]
    except OSError:
        return None
    return pid if state == [b"Z"] else None


class RepoLock:
    """``with RepoLock(data_dir): ...`` holds ``data_dir/repo.lock`` or raises DataDirLocked."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = data_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            pid = _read_pid(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = f"pid {pid}" if pid else "another process"
            raise DataDirLocked(
                f"data dir {self.data_dir} is in use by {holder} (it holds {self.path}); "
                "stop that node first or use another --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        # Truncate before unlocking: a reader never sees our PID on a free lock.
        os.ftruncate(self._fd, 0)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RepoLock:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
