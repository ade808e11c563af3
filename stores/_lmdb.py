"""LmdbStore: the default persistent store, embedded, on a directory.

Concurrent writes are committed together (group commit): each writer queues its write and
takes the commit lock, and the holder commits everything queued in one transaction. Each
caller is answered only after the commit holding its write is on disk. Reads run in
the caller's thread on LMDB's lock-free MVCC snapshots.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import lmdb
import msgspec
from loguru import logger

from parlour.runtime.errors import (
    ConversationNotFoundError,
    CorruptSnapshotError,
    IllegalStateError,
    StaleVersionError,
)
from parlour.runtime.snapshots import ConversationPersistenceSnapshot, MessageSnapshot
from parlour.stores._memory import foreign, notify_deleted, require_id
from parlour.stores._protocols import ConversationSummary
from parlour.stores._records import (
    Header,
    MessagePlan,
    conversation_key,
    decode_record,
    encode_body,
    header_decoder,
    header_encoder,
    message_key,
    message_prefix,
    plan_messages,
)


class StoreStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """The store's size: the map, the pages in use, the conversations held."""

    map_size: int
    used_bytes: int
    conversations: int


_Write = Callable[[Any], Any]  # applied inside the writer's transaction
# what a write raises before it writes anything: the rest of its batch is unaffected
_REFUSALS = (ConversationNotFoundError, PermissionError, StaleVersionError, ValueError)


class _ReadGate:
    """Shared for read transactions, exclusive for resizing the map: LMDB requires that no
    transaction be open in the process while ``set_mapsize`` runs, and does not check."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._resizing = False

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if self._readers == 0:
                    self._cond.notify_all()

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


class LmdbStore:
    """A ``PersistentStore`` on an LMDB environment in ``path``.

    Args:
        path: the directory (created if missing).
        map_size: the initial map size in bytes; the map grows on demand when it fills.
        sync: fsync each commit (durable). False trades durability for speed.
        max_batch: most writes one group commit takes.

    Thread-safety: every method may be called from any thread. ``close()`` drains queued
    writes before it returns.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        map_size: int = 1 << 30,
        sync: bool = True,
        max_batch: int = 512,
        remembered: int = 4096,
    ) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._sync = sync
        self._open(map_size)
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[tuple[_Write, Future[Any], int]] = queue.SimpleQueue()
        self._commit_lock = threading.Lock()
        self._gate = _ReadGate()
        self._closed = False
        # What this store last wrote of each conversation's messages, by identity (bounded);
        # written only under the commit lock, after the commit that wrote them.
        self._written: OrderedDict[str, list[MessageSnapshot]] = OrderedDict()
        self._pending: dict[str, list[MessageSnapshot] | None] = {}
        self._remembered = remembered
        self._listeners: list[Callable[[str], None]] = []

    # -- writes -----------------------------------------------------------------------------

    def create_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> None:
        cid = require_id(snapshot)
        key, body = conversation_key(cid), encode_body(snapshot)
        plan = plan_messages(None, snapshot.messages)  # a create writes every message

        def write(txn: Any) -> int:
            now = dt.datetime.now(dt.UTC)
            raw = txn.get(key, db=self._heads)
            old = None if raw is None else header_decoder.decode(raw)
            if old is not None and old.user_id != user_id:
                raise foreign(cid, user_id)
            head = Header(
                user_id=user_id,
                title=snapshot.title if old is None else old.title,
                created_at=now if old is None else old.created_at,
                updated_at=now,
                message_count=len(plan.messages),
                version=1 if old is None else old.version + 1,
            )
            self._put(txn, key, cid, head, body, plan, 0 if old is None else old.message_count)
            return head.version

        return int(self._submit(write, len(body) + plan.size))

    def save_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> None:
        cid = require_id(snapshot)
        key, body = conversation_key(cid), encode_body(snapshot)
        plan = plan_messages(self._written.get(cid), snapshot.messages)

        def write(txn: Any) -> int:
            raw = txn.get(key, db=self._heads)
            if raw is None:
                raise ConversationNotFoundError(
                    f"Conversation {cid} has no stored record; it may have been deleted. "
                    "The save was refused rather than resurrect it."
                )
            old = header_decoder.decode(raw)
            if old.user_id != user_id:
                raise foreign(cid, user_id)
            if snapshot.stored_version != old.version:
                raise StaleVersionError(cid, snapshot.stored_version, old.version)
            head = msgspec.structs.replace(
                old,
                updated_at=dt.datetime.now(dt.UTC),
                message_count=len(plan.messages),
                version=old.version + 1,
            )
            self._put(txn, key, cid, head, body, plan, old.message_count)
            return head.version

        return int(self._submit(write, len(body) + plan.size))

    def _put(
        self,
        txn: Any,
        key: bytes,
        cid: str,
        head: Header,
        body: bytes,
        plan: MessagePlan,
        old_count: int,
    ) -> None:
        """Write a conversation inside the commit: header, body, the changed messages, and
        the removal of messages past the new end. Runs under the commit lock."""
        known = self._known(cid)
        if plan.start and plan.base is not known:  # another write landed since planning
            plan = plan_messages(known, plan.messages)
        txn.put(key, header_encoder.encode(head), db=self._heads)
        txn.put(key, body, db=self._bodies)
        for index, data in enumerate(plan.encoded, start=plan.start):
            txn.put(message_key(key, index), data, db=self._messages)
        for index in range(len(plan.messages), old_count):
            txn.delete(message_key(key, index), db=self._messages)
        self._pending[cid] = plan.messages

    def _known(self, cid: str) -> list[MessageSnapshot] | None:
        """What the store has written of ``cid``'s messages, this batch included."""
        if cid in self._pending:
            return self._pending[cid]
        return self._written.get(cid)

    def delete(self, conversation_id: str, user_id: str) -> bool:
        key = conversation_key(conversation_id)

        def write(txn: Any) -> bool:
            raw = txn.get(key, db=self._heads)
            if raw is None:
                return False
            head = header_decoder.decode(raw)
            if head.user_id != user_id:
                raise foreign(conversation_id, user_id)
            txn.delete(key, db=self._heads)
            txn.delete(key, db=self._bodies)
            for index in range(head.message_count):
                txn.delete(message_key(key, index), db=self._messages)
            self._pending[conversation_id] = None
            return True

        removed = bool(self._submit(write, 0))
        if removed:
            notify_deleted(self._listeners, conversation_id)
        return removed

    def add_delete_listener(self, listener: Callable[[str], None]) -> None:
        self._listeners.append(listener)

    # -- reads ------------------------------------------------------------------------------

    def load(
        self, conversation_id: str, user_id: str, caller: object = None
    ) -> ConversationPersistenceSnapshot | None:
        key = conversation_key(conversation_id)
        with self._gate.shared(), self._env.begin(buffers=True) as txn:
            raw = txn.get(key, db=self._heads)
            if raw is None:
                return None
            head = header_decoder.decode(raw)
            if head.user_id != user_id:
                raise foreign(conversation_id, user_id)
            body = txn.get(key, db=self._bodies)
            if body is None:  # a head without a body: only a damaged file can do this
                raise CorruptSnapshotError(f"Stored conversation {conversation_id} has no body.")
            messages = self._read_messages(txn, key, head.message_count)
            snapshot = decode_record(conversation_id, body, messages, head.message_count)
            snapshot.stored_version = head.version
            return snapshot

    def version_of(self, conversation_id: str, user_id: str) -> int | None:
        with self._gate.shared(), self._env.begin(buffers=True) as txn:
            raw = txn.get(conversation_key(conversation_id), db=self._heads)
            if raw is None:
                return None
            head = header_decoder.decode(raw)
            if head.user_id != user_id:
                raise foreign(conversation_id, user_id)
            return head.version

    def _read_messages(self, txn: Any, key: bytes, count: int) -> list[memoryview]:
        prefix = message_prefix(key)
        found: list[memoryview] = []
        cursor = txn.cursor(db=self._messages)
        if not cursor.set_range(prefix):
            return found
        for item_key, value in cursor:
            if len(found) == count or not bytes(item_key).startswith(prefix):
                break
            found.append(value)
        return found

    def exists(self, conversation_id: str, user_id: str) -> bool:
        with self._gate.shared(), self._env.begin(buffers=True) as txn:
            raw = txn.get(conversation_key(conversation_id), db=self._heads)
            return raw is not None and header_decoder.decode(raw).user_id == user_id

    def list_conversations(self, user_id: str) -> list[ConversationSummary]:
        """The user's conversations, most recently updated first."""
        found = []
        with self._gate.shared(), self._env.begin(buffers=True) as txn:
            for key, raw in txn.cursor(db=self._heads):
                head = header_decoder.decode(raw)
                if head.user_id == user_id:
                    found.append(
                        ConversationSummary(
                            conversation_id=bytes(key).decode(),
                            title=head.title,
                            created_at=head.created_at,
                            updated_at=head.updated_at,
                        )
                    )
        return sorted(found, key=lambda s: s.updated_at, reverse=True)

    def get_version_history(self, conversation_id: str, user_id: str) -> list[dt.datetime]:
        raise NotImplementedError("LmdbStore does not keep version history yet.")

    def load_version(
        self, conversation_id: str, version: dt.datetime, user_id: str
    ) -> ConversationPersistenceSnapshot | None:
        raise NotImplementedError("LmdbStore does not keep version history yet.")

    def backup(self, destination: str | os.PathLike[str]) -> None:
        raise NotImplementedError("LmdbStore has no backup; copy the directory while closed.")

    def statistics(self) -> StoreStatistics:
        with self._gate.shared(), self._env.begin() as txn:
            conversations = txn.stat(self._heads)["entries"]
        info = self._env.info()
        return StoreStatistics(
            map_size=info["map_size"],
            used_bytes=(info["last_pgno"] + 1) * self._page_size,
            conversations=conversations,
        )

    # -- group commit -----------------------------------------------------------------------

    def _submit(self, write: _Write, size: int) -> Any:
        """Queue ``write``, then take the commit lock: whoever holds it commits everything
        queued so far in one transaction. While one commit syncs, the next writers queue up
        and the first of them to get the lock commits them all together."""
        if self._closed:
            raise IllegalStateError(f"LmdbStore at {self.path} is closed.")
        done: Future[Any] = Future()
        self._queue.put((write, done, size))
        with self._commit_lock:
            if not done.done():
                batch = self._drain()
                self._make_room(sum(size for _, _, size in batch))
                self._commit([(w, d) for w, d, _ in batch])
        return done.result()

    def _drain(self) -> list[tuple[_Write, Future[Any], int]]:
        batch: list[tuple[_Write, Future[Any], int]] = []
        while len(batch) < self._max_batch:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _commit(self, batch: list[tuple[_Write, Future[Any]]]) -> None:
        """Apply every write in one transaction; a write that raises before writing fails
        alone, the rest commit together. Nobody is answered before the commit is durable."""
        while True:
            outcomes: list[tuple[bool, Any]] = []
            self._pending.clear()
            try:
                with self._env.begin(write=True) as txn:
                    for write, _ in batch:
                        try:
                            outcomes.append((True, write(txn)))
                        except lmdb.MapFullError:
                            raise
                        except Exception as exc:  # the caller gets it; the batch goes on
                            outcomes.append((False, exc))
            except lmdb.MapFullError:
                self._grow()
                continue
            except Exception as exc:
                logger.opt(exception=exc).error("LMDB commit failed at {}", self.path)
                for _, done in batch:
                    done.set_exception(exc)
                return
            break
        self._remember(outcomes)
        for (ok, value), (_, done) in zip(outcomes, batch, strict=True):
            if ok:
                done.set_result(value)
            else:
                done.set_exception(value)

    def _remember(self, outcomes: list[tuple[bool, Any]]) -> None:
        """After a commit: what it wrote becomes what the store knows it has written."""
        if any(not ok and not isinstance(value, _REFUSALS) for ok, value in outcomes):
            # a write failed part-way through: trust nothing, the next saves write in full
            self._written.clear()
            return
        for cid, messages in self._pending.items():
            if messages is None:
                self._written.pop(cid, None)
            else:
                self._written[cid] = messages
                self._written.move_to_end(cid)
        while len(self._written) > self._remembered:
            self._written.popitem(last=False)
        self._pending.clear()

    def _open(self, map_size: int) -> None:
        self._env = lmdb.open(
            str(self.path),
            map_size=map_size,
            max_dbs=4,
            sync=self._sync,
            metasync=self._sync,
            max_readers=1024,
        )
        self._heads = self._env.open_db(b"heads")
        self._bodies = self._env.open_db(b"bodies")
        self._messages = self._env.open_db(b"messages")
        self._page_size = self._env.stat()["psize"]

    def _make_room(self, incoming: int) -> None:
        """Grow the map before a batch could fill it. LMDB running out of map while other
        threads hold read transactions hung here (py-lmdb 2.x and 3.0), so a full map must
        stay the rare fallback, not the way growth is discovered."""
        info = self._env.info()
        used, size = (info["last_pgno"] + 1) * self._page_size, info["map_size"]
        if used + 4 * incoming + (1 << 20) > size // 2:
            self._grow(max(2 * size, 2 * (used + 4 * incoming + (1 << 20))))

    def _grow(self, size: int | None = None) -> None:
        """Grow the map (to ``size``, else twice). Called under the commit lock, so no write
        transaction is open; the gate keeps readers out, as ``set_mapsize`` requires."""
        size = size or self._env.info()["map_size"] * 2
        logger.info("growing the LMDB map at {} to {} bytes", self.path, size)
        with self._gate.exclusive():
            self._env.set_mapsize(size)

    def close(self) -> None:
        """Finish queued writes, then close the environment. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._commit_lock:  # a commit in flight finishes first
            self._env.close()

    def __enter__(self) -> LmdbStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
