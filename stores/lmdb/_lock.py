"""The store's locks: one writing process per directory (an exclusive ``flock`` on a lock
file in it), and the in-process gate between read transactions and map resizes.

LMDB itself would let two processes write the same environment, but each ``LmdbStore``
plans incremental saves from its own memory of what it wrote, so a second writer would
corrupt conversations. The lock is taken at open and held until close; the kernel drops it
when the process dies, so a killed writer never leaves the directory locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from parlour.runtime.errors import IllegalStateError

LOCK_FILE = "parlour-writer.lock"


class StoreInUseError(IllegalStateError):
    """Another process (or another open store) writes the directory: only one writer may
    open it. ``directory`` and ``holder`` (the holder's pid, or "unknown") let an
    application say what to do in its own terms."""

    def __init__(self, directory: Path, holder: str) -> None:
        self.directory = directory
        self.holder = holder
        super().__init__(
            f"The store at {directory} is already open for writing by process {holder}; "
            "only one writer may open a directory (open it with readonly=True to read "
            "beside it)."
        )


class WriterLock:
    """The exclusive writer lock on ``directory``, taken by the constructor.

    Raises:
        StoreInUseError: another process (or another open store) holds it; the message
            names the directory and the holder's pid.

    Thread-safety: ``release`` once, from any thread.
    """

    def __init__(self, directory: Path) -> None:
        self._fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(self._fd)
            raise StoreInUseError(directory, holder) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        """Drop the lock (closing the file releases it)."""
        os.close(self._fd)


class ReadGate:
    """Shared for read transactions, exclusive for resizing the map: LMDB requires that no
    transaction be open in the process while ``set_mapsize`` runs, and does not check.

    A read takes ``enter`` and ``leave`` (one short lock each, about 0.2 µs: every read
    passes here); the condition is waited on only while a resize is wanted.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._readers = 0
        self._resizing = False

    def enter(self) -> None:
        """Begin a shared hold; waits while a resize is wanted or running."""
        with self._lock:
            while self._resizing:
                self._cond.wait()
            self._readers += 1

    def leave(self) -> None:
        """End a shared hold taken with ``enter``."""
        with self._lock:
            self._readers -= 1
            if self._resizing and not self._readers:
                self._cond.notify_all()

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        self.enter()
        try:
            yield
        finally:
            self.leave()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._resizing = True
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._resizing = False
                self._cond.notify_all()
