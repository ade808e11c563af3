"""LmdbStore: the default persistent store, embedded, on a directory.

Writes go through the group commit (``_group_commit``): concurrent writers share one
transaction and one fsync, each answered after the commit holding its write is on disk.
Reads run in the caller's thread on LMDB's lock-free MVCC snapshots. One process writes a
directory (``_lock``); any number may read it with ``readonly=True``.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import lmdb
import msgspec

from parlour.runtime.errors import ConversationNotFoundError, IllegalStateError, StaleVersionError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot

from .._body import Body, body_after
from .._ids import check_owner, conversation_key, order_bytes, require_id, user_key
from .._memory import DeleteListeners
from .._protocols import ConversationSummary
from .._records import (
    Header,
    MessagePlan,
    UsagePlan,
    advanced,
    header_encoder,
    plan_messages,
    plan_usage,
    replanned,
    write_run,
)
from .._waiting import waiting
from . import _layout, _reads, _versions
from ._bookkeeping import Bookkeeping
from ._group_commit import GroupCommit, Write
from ._history import LmdbHistory
from ._layout import Databases
from ._lock import ReadGate, WriterLock

T = TypeVar("T")


class LmdbStore(LmdbHistory):
    """A ``PersistentStore`` on an LMDB environment in ``path``.

    Args:
        path: the directory (a writer creates it if missing; a reader requires it).
        map_size: the initial map size in bytes; the map grows on demand when it fills.
        sync: fsync each commit (durable). False trades durability for speed: an OS crash
            (not a killed process) can lose commits and, the map written in place, the file.
        max_batch: most writes one group commit takes.
        remembered: how many conversations' written records to remember (to write changes).
        readonly: open for reading only, beside the directory's writer (in this or another
            process); every write raises ``IllegalStateError``.
        history: keep every save as a version (``get_version_history``, ``load_version``).
        keep_versions: how many of a conversation's newest versions to keep (None: all).
        keep_for: how long to keep a version (None: no age limit). The current version
            always stays; ``prune()`` applies the policy, as does every 64th save of a
            conversation to that conversation.
        now: the wall clock that stamps saves (read once a commit: saves committed together
            share a time) and ages versions (UTC now by default).

    Raises:
        IllegalStateError: another writer holds the directory (the message names its pid),
            or the directory's layout is newer than this code (or, read-only, older).
        FileNotFoundError: ``readonly`` and there is no store at ``path``.
        ValueError: ``keep_versions`` is below 1.

    Thread-safety: every method may be called from any thread. ``close()`` commits the
    writes queued before it, and every later call raises ``IllegalStateError``.
    """

    shared = False  # one writing process per directory: warm copies need no check
    lets_go_while_waiting = True  # its commits' waits run in ``_waiting.waiting()``

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        map_size: int = 1 << 30,
        sync: bool = True,
        max_batch: int = 512,
        remembered: int = 4096,
        readonly: bool = False,
        history: bool = True,
        keep_versions: int | None = 100,
        keep_for: dt.timedelta | None = None,
        now: Callable[[], dt.datetime] | None = None,
    ) -> None:
        if keep_versions is not None and keep_versions < 1:
            raise ValueError(f"keep_versions must be at least 1 (or None), got {keep_versions}.")
        self._now = now or (lambda: dt.datetime.now(dt.UTC))
        self._retention = (
            _versions.Retention.of(keep_versions, keep_for, self._now) if history else None
        )
        self.path = Path(path)
        self.readonly = readonly
        self._gate = ReadGate()
        self._closed = False
        self._close_lock = threading.Lock()
        self._lock = None if readonly else self._take_directory()
        try:
            self._env, self._dbs = self._open(map_size, sync)
        except BaseException:
            if self._lock is not None:
                self._lock.release()
            raise
        self._book = Bookkeeping(self._env, self._gate, self.path, remembered)
        self._commits = GroupCommit(self._book, str(self.path), max_batch, sync)
        self._listeners = DeleteListeners()

    def _take_directory(self) -> WriterLock:
        self.path.mkdir(parents=True, exist_ok=True)
        return WriterLock(self.path)

    def _open(self, map_size: int, sync: bool) -> tuple[Any, Databases]:
        if self.readonly and not (self.path / "data.mdb").is_file():
            raise FileNotFoundError(f"There is no parlour store at {self.path} to read.")
        try:
            env = lmdb.open(
                str(self.path),
                map_size=map_size,
                max_dbs=len(_layout.NAMES),
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

    # -- writes -----------------------------------------------------------------------------

    def create_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> int:
        key = require_id(snapshot, user_id)
        cid, body = str(snapshot.conversation_id), body_after(snapshot, None)
        plan = plan_messages(None, snapshot.messages)  # a create writes every message
        usage = plan_usage(None, snapshot.usage)

        def write(txn: Any) -> int:
            now = self._book.moment(self._now)
            old = self._written_head(txn, key, cid, user_id)
            if old is None:
                version = _layout.last_version(txn, self._dbs, key) + 1
                txn.delete(key, db=self._dbs.tombstones)
                head = Header(
                    user_id=user_id,
                    title=snapshot.title,
                    created_at=now,
                    updated_at=now,
                    message_count=len(plan.items),
                    version=version,
                    usage_count=len(usage.items),
                )
            else:
                head = advanced(old, now, len(plan.items), len(usage.items))
            self._put(txn, key, cid, old, head, body, plan, usage)
            return head.version

        return int(self._submit(write, len(body.data) + plan.size + usage.size))

    def save_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> int:
        return int(self._submit(*self._update(snapshot, user_id)))

    def save_context_later(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> Callable[[], int]:
        """``save_context`` queued for the next commit, not waited for (``PersistentStore``
        says how); bad ids, a snapshot naming another user, a closed or read-only store
        raise at once."""
        slot = self._submit(*self._update(snapshot, user_id, queued=True), later=True)
        return partial(self._commits.settle, slot)

    def _update(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, queued: bool = False
    ) -> tuple[Write, int]:
        """An update's write and size; the next save plans against a ``queued`` (deferred) one."""
        key = require_id(snapshot, user_id)
        cid = str(snapshot.conversation_id)
        last = self._book.planning_base(cid)  # its body, when this one is the same: no encoding
        body = body_after(snapshot, None if last is None else last[1])
        plan = plan_messages(None if last is None else last[0], snapshot.messages)
        usage = plan_usage(None if last is None else last[2], snapshot.usage)
        planned = (plan.items, body, usage.items, None)
        if queued:
            self._book.queue(cid, planned)

        def write(txn: Any) -> int:
            if queued:
                self._book.dequeue(cid, planned)
            old = self._written_head(txn, key, cid, user_id)
            if old is None:
                raise ConversationNotFoundError(
                    f"Conversation {cid} has no stored record; it may have been deleted. "
                    "The save was refused rather than resurrect it."
                )
            if snapshot.stored_version != old.version:
                raise StaleVersionError(cid, snapshot.stored_version, old.version)
            head = advanced(old, self._book.moment(self._now), len(plan.items), len(usage.items))
            self._put(txn, key, cid, old, head, body, plan, usage)
            return head.version

        return write, len(body.data) + plan.size + usage.size

    def _put(
        self,
        txn: Any,
        key: bytes,
        cid: str,
        old: Header | None,
        head: Header,
        body: Body,
        plan: MessagePlan,
        usage: UsagePlan,
    ) -> None:
        """Write a conversation inside its save's write: owner index, body (when it
        changed), the changed messages and ledger entries, the removal of those past the
        new ends, the version record, and the header (last: it holds the history's chain)."""
        known = None if old is None else self._book.known(cid)  # a new record: everything
        base, ledger = (None, None) if known is None else (known[0], known[2])
        if plan.base is not base or usage.base is not ledger:  # another write landed since
            plan, usage = replanned(base, ledger, plan, usage)
        _layout.reindex(txn, self._dbs, old, head, key)
        same = known is not None and (body is known[1] or body.data == known[1].data)
        if not same:  # the usual turn leaves the body as it was (its version records none)
            txn.put(key, body.data, db=self._dbs.bodies)
        write_run(txn, self._dbs.messages, key, plan, 0 if old is None else old.message_count)
        if usage.writes or (old is not None and len(usage.items) < old.usage_count):
            write_run(txn, self._dbs.usage, key, usage, 0 if old is None else old.usage_count)
        chain = self._record(txn, key, old, head, body.data, same, plan, usage)
        head = head if chain == head.history else msgspec.structs.replace(head, history=chain)
        txn.put(key, header_encoder.encode(head), db=self._dbs.heads)
        self._book.note(cid, (plan.items, body, usage.items, head))  # never after a raise

    def delete(self, conversation_id: str, user_id: str) -> bool:
        key = conversation_key(conversation_id)
        user_key(user_id)

        def write(txn: Any) -> bool:
            head = self._head(txn, key, conversation_id, user_id)
            if head is None:
                return False
            _layout.remove(txn, self._dbs, key, head)
            self._book.note(conversation_id, None)
            return True

        return self._removed(conversation_id, bool(self._submit(write, 0)))

    def _removed(self, conversation_id: str, removed: bool) -> bool:
        if removed:
            self._listeners.notify(conversation_id)
        return removed

    def add_delete_listener(self, listener: Callable[[str], None]) -> None:
        self._listeners.add(listener)

    def remove_delete_listener(self, listener: Callable[[str], None]) -> None:
        self._listeners.remove(listener)

    # -- reads ------------------------------------------------------------------------------

    def _head(self, txn: Any, key: bytes, cid: str, user_id: str) -> Header | None:
        return _reads.owned_head(txn, self._dbs, key, cid, user_id)

    def _written_head(self, txn: Any, key: bytes, cid: str, user_id: str) -> Header | None:
        """``_head`` in a save: the header this store last wrote, remembered (the directory's
        only writer: what it wrote is what is there), else read."""
        known = self._book.known(cid)
        if known is None or known[3] is None:
            return self._head(txn, key, cid, user_id)
        check_owner(known[3].user_id, cid, user_id)
        return known[3]

    def load(
        self, conversation_id: str, user_id: str, caller: object = None
    ) -> ConversationPersistenceSnapshot | None:
        key = conversation_key(conversation_id)
        user_key(user_id)

        def read(txn: Any) -> ConversationPersistenceSnapshot | None:
            head = self._head(txn, key, conversation_id, user_id)
            if head is None:
                return None
            return _reads.record_of(txn, self._dbs, key, conversation_id, head)

        return self._view(read)

    def version_of(self, conversation_id: str, user_id: str) -> int | None:
        head = self._own_head(conversation_id, user_id)
        return None if head is None else head.version

    def exists(self, conversation_id: str, user_id: str) -> bool:
        try:
            return self._own_head(conversation_id, user_id) is not None
        except PermissionError:
            return False

    def _own_head(self, conversation_id: str, user_id: str) -> Header | None:
        key = conversation_key(conversation_id)
        user_key(user_id)
        return self._view(lambda txn: self._head(txn, key, conversation_id, user_id))

    def list_conversations(
        self, user_id: str, *, limit: int | None = None, after: ConversationSummary | None = None
    ) -> list[ConversationSummary]:
        """The user's conversations, most recently updated first (ties by id), read from
        the user's owner index only: another user's records, damaged or not, are never
        read. A record of the user's whose header is damaged is left out (``damaged``
        finds it). ``limit`` caps the page; ``after`` (the last summary of the previous
        page) starts the page after it.

        Raises:
            ValueError: an invalid user id, or a negative limit.
        """
        owner = user_key(user_id)
        if limit is not None and limit < 0:
            raise ValueError(f"A listing limit cannot be negative, got {limit}.")
        start = (
            None
            if after is None
            else order_bytes(after.updated_at, conversation_key(after.conversation_id))
        )
        return self._view(lambda txn: _reads.listing(txn, self._dbs, owner, user_id, limit, start))

    def _view(self, read: Callable[[Any], T]) -> T:
        """Run ``read`` in a read transaction. A map grown by the writer (in another
        process) is adopted and the read retried."""
        gate = self._gate
        while True:
            gate.enter()  # not the context manager: every read comes here (~1 µs less)
            try:
                if self._closed:
                    raise IllegalStateError(f"LmdbStore at {self.path} is closed.")
                with self._env.begin(buffers=True) as txn:
                    return read(txn)
            except lmdb.MapResizedError:
                pass  # adopted below, outside the shared hold, then read again
            finally:
                gate.leave()
            with gate.exclusive():
                self._env.set_mapsize(0)

    # -- group commit -----------------------------------------------------------------------

    def _submit(self, write: Write, size: int, later: bool = False) -> Any:
        """Commit ``write``, answered once durable; or (``later``) queue it: its slot."""
        if self.readonly:
            raise IllegalStateError(
                f"LmdbStore at {self.path} is open read-only; nothing was written."
            )
        return self._commits.defer(write, size) if later else self._commits.submit(write, size)

    def close(self) -> None:
        """Commit the writes queued so far, then close the environment and release the
        directory. Idempotent; every later call raises ``IllegalStateError``."""
        with waiting(), self._close_lock:  # it waits for another close and the commit lock
            if not self._closed:
                self._commits.close(self._finish)

    def _finish(self) -> None:
        with self._gate.exclusive():  # reads in flight finish first
            self._closed = True
            self._env.close()
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> LmdbStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
