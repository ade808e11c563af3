"""One open store directory: what ``LmdbStore`` and its collaborators read and write through.

A writer takes the directory's lock (``_lock``), opens the LMDB environment and its named
databases (``_layout``), and commits through the group commit (``_group_commit``) with its
bookkeeping; reads run in the caller's thread on a read transaction behind the read gate.
``close`` commits what is queued, then ends both.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from parlour.runtime.errors import IllegalStateError

from .._protocols import SaveFuture
from .._waiting import waiting
from . import _layout
from ._bookkeeping import Bookkeeping
from ._databases import NAMES, Databases
from ._group_commit import GroupCommit, Slot, Write
from ._lock import ReadGate, WriterLock

T = TypeVar("T")


class Directory:
    """The LMDB environment in ``path``, open for the store: its databases (``dbs``), the
    raw environment (``env``), the read gate, the writer lock (none when ``readonly``), and
    the group commit (``commits``) with the bookkeeping it calls (``book``).

    Args:
        path: the directory (a writer creates it if missing; a reader requires it).
        map_size: the initial map size in bytes.
        sync: fsync each commit (and write pages at commit, not in place).
        max_batch: most writes one group commit takes.
        remembered: how many conversations' written records ``book`` remembers.
        readonly: open beside the directory's writer; every write raises.

    Raises:
        IllegalStateError: another writer holds the directory, the environment is already
            open in this process, or the layout is newer than this code (or, read-only,
            older).
        FileNotFoundError: ``readonly`` and there is no store at ``path``.

    Thread-safety: ``view``, ``submit``, ``defer`` and ``settle`` from any thread,
    ``submit_async`` from a running loop's thread; ``close``
    from any thread, once or more (later calls do nothing).
    """

    def __init__(
        self,
        path: Path,
        *,
        map_size: int,
        sync: bool,
        max_batch: int,
        remembered: int,
        readonly: bool,
    ) -> None:
        self.path = path
        self.readonly = readonly
        self.gate = ReadGate()
        self.closed = False
        self._close_lock = threading.Lock()
        self._lock = None if readonly else self._take()
        try:
            self.env, self.dbs = self._open(map_size, sync)
        except BaseException:
            if self._lock is not None:
                self._lock.release()
            raise
        self.book = Bookkeeping(self.env, self.gate, path, remembered)
        self.commits = GroupCommit(self.book, str(path), max_batch, sync)

    def _take(self) -> WriterLock:
        self.path.mkdir(parents=True, exist_ok=True)
        return WriterLock(self.path)

    def _open(self, map_size: int, sync: bool) -> tuple[Any, Databases]:
        if self.readonly and not (self.path / "data.mdb").is_file():
            raise FileNotFoundError(f"There is no parlour store at {self.path} to read.")
        try:
            env = lmdb.open(
                str(self.path),
                map_size=map_size,
                max_dbs=len(NAMES),
                sync=sync,
                metasync=sync,
                max_readers=1024,
                readonly=self.readonly,
                create=not self.readonly,
                # in place, unsynced (a save's puts cost half); synced, copied and written at
                # commit: a written-in-place page faults on its first write after each flush
                writemap=not self.readonly and not sync,
            )
        except lmdb.Error as exc:  # LMDB allows one environment per directory per process
            if "already open" not in str(exc):
                raise
            raise IllegalStateError(
                f"The store at {self.path} is already open in this process; use that store "
                f"(read-only stores are for other processes): {exc}"
            ) from exc
        try:
            return env, _layout.open_databases(env, self.path, self.readonly)
        except BaseException:
            env.close()
            raise

    def view(self, read: Callable[[Any], T]) -> T:
        """Run ``read`` in a read transaction. A map grown by the writer (in another
        process) is adopted and the read retried.

        Raises:
            IllegalStateError: the directory is closed.
        """
        gate = self.gate
        while True:
            gate.enter()  # not the context manager: every read comes here (~1 µs less)
            try:
                if self.closed:
                    raise IllegalStateError(f"LmdbStore at {self.path} is closed.")
                with self.env.begin(buffers=True) as txn:
                    return read(txn)
            except lmdb.MapResizedError:
                pass  # adopted below, outside the shared hold, then read again
            finally:
                gate.leave()
            with gate.exclusive():
                self.env.set_mapsize(0)

    def submit(self, write: Write, size: int) -> Any:
        """Commit ``write`` (of about ``size`` bytes); answered once durable, with what it
        returned.

        Raises:
            IllegalStateError: the directory is read-only or closed (nothing was written).
            Exception: what ``write`` raised; nothing of it was written.
        """
        if self.readonly:
            raise self._readonly_error()
        return self.commits.submit(write, size)

    def submit_async(self, write: Write, size: int) -> SaveFuture:
        """``submit`` from the running loop, never blocking it: a future the commit
        completes on this loop (``GroupCommit.submit_async``).

        Raises:
            IllegalStateError: the directory is read-only or closed (nothing was queued).
        """
        if self.readonly:
            raise self._readonly_error()
        return self.commits.submit_async(write, size)

    def defer(self, write: Write, size: int) -> Slot:
        """Queue ``write`` for the next commit without waiting: ``commits.settle(slot)``
        waits for it.

        Raises:
            IllegalStateError: the directory is read-only or closed (nothing was queued).
        """
        if self.readonly:
            raise self._readonly_error()
        return self.commits.defer(write, size)

    def _readonly_error(self) -> IllegalStateError:
        return IllegalStateError(
            f"LmdbStore at {self.path} is open read-only; nothing was written."
        )

    def close(self) -> None:
        """Commit the writes queued so far, then close the environment (reads in flight
        finish first) and release the directory. Idempotent."""
        with waiting(), self._close_lock:  # it waits for another close and the commit lock
            if not self.closed:
                self.commits.close(self._finish)

    def _finish(self) -> None:
        with self.gate.exclusive():  # reads in flight finish first
            self.closed = True
            self.env.close()
        if self._lock is not None:
            self._lock.release()
