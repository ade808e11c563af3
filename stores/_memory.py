"""In-memory stores: a bounded LRU session cache, and a persistent store for tests."""

from __future__ import annotations

import datetime as dt
import threading
from collections import OrderedDict
from collections.abc import Callable

import msgspec
from loguru import logger

from parlour.runtime.errors import ConversationNotFoundError, StaleVersionError
from parlour.runtime.snapshots import (
    Appended,
    ConversationPersistenceSnapshot,
    decode_snapshot,
)

from ._body import whole
from ._ids import (
    check_owner,
    conversation_key,
    order_of,
    require_id,
    user_key,
)
from ._protocols import (
    ConversationSummary,
    ConversationVersion,
    SaveFuture,
    Settle,
    no_appends,
    saved_in_thread,
    saved_now,
)
from ._reserved import Reservations


class MemorySessionCache:
    """A bounded LRU of snapshots. Thread-safe (one short lock around the dict)."""

    lets_go_while_waiting = True  # it never waits

    def __init__(self, capacity: int = 1024) -> None:
        if capacity < 1:
            raise ValueError(f"Session cache capacity must be at least 1, got {capacity}.")
        self._capacity = capacity
        self._entries: OrderedDict[str, ConversationPersistenceSnapshot] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, conversation_id: str, user_id: str) -> ConversationPersistenceSnapshot | None:
        with self._lock:
            snapshot = self._entries.get(conversation_id)
            if snapshot is None or snapshot.user_id != user_id:
                return None
            self._entries.move_to_end(conversation_id)
            return snapshot

    def put(self, snapshot: ConversationPersistenceSnapshot) -> None:
        if snapshot.conversation_id is None:
            raise ValueError("Cannot cache a conversation snapshot whose conversation_id is None.")
        key = snapshot.conversation_id
        with self._lock:
            self._entries[key] = snapshot
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)

    def delete(self, conversation_id: str) -> None:
        with self._lock:
            self._entries.pop(conversation_id, None)

    def __len__(self) -> int:
        return len(self._entries)


class MemoryStore:
    """A ``PersistentStore`` held in a dict: the reference implementation for contract tests.

    It refuses what ``LmdbStore`` refuses (the same id limits, identity and ownership
    checks, fencing, versions that never restart), keeps the owner, title and creation
    time from the first save, and lists in the same order.

    Every save is kept as a version, in its encoded bytes as a durable store keeps it (so
    nothing the caller does to its snapshot afterwards reaches the stored one, and a load
    decodes, refusing what does not), the newest ``keep_versions`` of each conversation
    (None: all); a delete removes them.

    Thread-safety: every method from any thread (one lock around the dict).
    """

    shared = False  # one process: warm copies need no check
    lets_go_while_waiting = True  # it never waits
    defers_saves = False  # nothing to gain: a save is a dict update
    appends = False  # an append is refused: the caller saves the whole snapshot

    def __init__(
        self,
        *,
        keep_versions: int | None = 100,
        now: Callable[[], dt.datetime] | None = None,
    ) -> None:
        if keep_versions is not None and keep_versions < 1:
            raise ValueError(f"keep_versions must be at least 1 (or None), got {keep_versions}.")
        self._keep = keep_versions
        self._now = now or (lambda: dt.datetime.now(dt.UTC))
        self._versions: dict[str, list[tuple[ConversationVersion, _Record]]] = {}
        self._records: dict[str, _Record] = {}
        self._last_versions: dict[str, int] = {}  # survives deletes: versions never restart
        self._listeners = DeleteListeners()
        self._lock = threading.Lock()
        self._reserved = Reservations()

    def create_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> int:
        require_id(snapshot, user_id)
        self._reserved.check(snapshot.conversation_id, user_id)
        key = str(snapshot.conversation_id)
        now = self._now()
        with self._lock:
            existing = self._owned(key, user_id)
            if existing is None:
                summary = ConversationSummary(
                    conversation_id=key, title=snapshot.title, created_at=now, updated_at=now
                )
            else:
                summary = msgspec.structs.replace(existing.summary, updated_at=now)
            version = self._last_versions.get(key, 0) + 1
            self._store(key, _Record(user_id, summary, snapshot, version))
            return version

    def reserve(self, conversation_id: str, user_id: str, holder: object) -> None:
        conversation_key(conversation_id)
        user_key(user_id)
        self._reserved.reserve(conversation_id, user_id, holder)

    def save_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> int:
        require_id(snapshot, user_id)
        key = str(snapshot.conversation_id)
        with self._lock:
            existing = self._owned(key, user_id)
            if existing is None:
                raise ConversationNotFoundError(f"Conversation {key} has no stored record.")
            current = self._last_versions[key]
            if snapshot.stored_version != current:
                raise StaleVersionError(key, snapshot.stored_version, current)
            summary = msgspec.structs.replace(existing.summary, updated_at=self._now())
            self._store(key, _Record(user_id, summary, snapshot, current + 1))
            return current + 1

    def save_context_later(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> Settle:
        """``save_context`` at once (this store does not defer: ``defers_saves`` is False),
        answered as ``PersistentStore`` says: what the record refuses from the handle."""
        return saved_now(snapshot, user_id, self.save_context)

    def append_context(self, appended: Appended, user_id: str, caller: object = None) -> int:
        raise no_appends(self)

    def append_context_later(
        self, appended: Appended, user_id: str, caller: object = None
    ) -> Settle:
        raise no_appends(self)

    def append_context_async(
        self, appended: Appended, user_id: str, caller: object = None
    ) -> SaveFuture:
        raise no_appends(self)

    def create_context_async(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> SaveFuture:
        """``create_context`` in a thread (this store does not queue writes)."""
        return saved_in_thread(snapshot, user_id, self.create_context)

    def save_context_async(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> SaveFuture:
        """``save_context`` in a thread (this store does not queue writes)."""
        return saved_in_thread(snapshot, user_id, self.save_context)

    def _store(self, key: str, record: _Record) -> None:
        version = record.version
        self._records[key] = record
        self._last_versions[key] = version
        kept = self._versions.setdefault(key, [])
        kept.append(
            (ConversationVersion(version=version, saved_at=record.summary.updated_at), record)
        )
        if self._keep is not None:
            del kept[: -self._keep]

    def _owned(self, conversation_id: str, user_id: str) -> _Record | None:
        """The one ownership check: the record, None when there is none.

        Raises:
            ValueError: an invalid id.
            PermissionError: another user owns the record.
        """
        conversation_key(conversation_id)
        user_key(user_id)
        existing = self._records.get(conversation_id)
        if existing is not None:
            check_owner(existing.user_id, conversation_id, user_id)
        return existing

    def load(
        self, conversation_id: str, user_id: str, caller: object = None
    ) -> ConversationPersistenceSnapshot | None:
        with self._lock:
            existing = self._owned(conversation_id, user_id)
        return None if existing is None else decode_snapshot(existing.data, conversation_id)

    def version_of(self, conversation_id: str, user_id: str) -> int | None:
        with self._lock:
            existing = self._owned(conversation_id, user_id)
        return None if existing is None else existing.version

    def delete(self, conversation_id: str, user_id: str) -> bool:
        with self._lock:
            if self._owned(conversation_id, user_id) is None:
                return False
            del self._records[conversation_id]
            self._versions.pop(conversation_id, None)
        self._listeners.notify(conversation_id)
        return True

    def exists(self, conversation_id: str, user_id: str) -> bool:
        try:
            with self._lock:
                return self._owned(conversation_id, user_id) is not None
        except PermissionError:
            return False

    def list_conversations(
        self, user_id: str, *, limit: int | None = None, after: ConversationSummary | None = None
    ) -> list[ConversationSummary]:
        """The user's conversations, most recently updated first (ties by id); ``limit``
        caps the page, ``after`` (the previous page's last summary) starts it after that.

        Raises:
            ValueError: an invalid user id, or a negative limit.
        """
        user_key(user_id)
        if limit is not None and limit < 0:
            raise ValueError(f"A listing limit cannot be negative, got {limit}.")
        with self._lock:
            found = [r.summary for r in self._records.values() if r.user_id == user_id]
        found.sort(key=lambda s: order_of(s.updated_at, s.conversation_id))
        if after is not None:
            start = order_of(after.updated_at, after.conversation_id)
            found = [s for s in found if order_of(s.updated_at, s.conversation_id) > start]
        return found if limit is None else found[:limit]

    def get_version_history(self, conversation_id: str, user_id: str) -> list[ConversationVersion]:
        """The kept versions, most recent first; empty when there is no such conversation.

        Raises:
            ValueError: an invalid id.
            PermissionError: the record belongs to another user.
        """
        with self._lock:
            if self._owned(conversation_id, user_id) is None:
                return []
            return [v for v, _ in reversed(self._versions[conversation_id])]

    def load_version(
        self, conversation_id: str, version: int | dt.datetime, user_id: str
    ) -> ConversationPersistenceSnapshot | None:
        """The conversation as it was at ``version`` (a number, or a time: the version
        current then); None when that version is not kept.

        Raises:
            ValueError: an invalid id.
            PermissionError: the record belongs to another user.
        """
        with self._lock:
            if self._owned(conversation_id, user_id) is None:
                return None
            kept = list(self._versions[conversation_id])
        if isinstance(version, dt.datetime):
            kept = [(v, r) for v, r in kept if v.saved_at <= version][-1:]
        else:
            kept = [(v, r) for v, r in kept if v.version == version]
        if not kept:
            return None
        return decode_snapshot(kept[-1][1].data, conversation_id)

    def add_delete_listener(self, listener: Callable[[str], None]) -> None:
        self._listeners.add(listener)

    def remove_delete_listener(self, listener: Callable[[str], None]) -> None:
        self._listeners.remove(listener)

    def close(self) -> None:
        """Nothing to release or commit: the store goes on answering (its records stay)."""


class _Record:
    """One stored version: its owner, its summary, and the snapshot's bytes (stamped with
    the version)."""

    __slots__ = ("data", "summary", "user_id", "version")

    def __init__(
        self,
        user_id: str,
        summary: ConversationSummary,
        snapshot: ConversationPersistenceSnapshot,
        version: int,
    ) -> None:
        self.user_id = user_id
        self.summary = summary
        self.version = version
        # or ValueError: nothing kept
        self.data = whole(msgspec.structs.replace(snapshot, stored_version=version))


class DeleteListeners:
    """A store's delete listeners. Added and removed under a lock, each time as a new
    tuple, so a delete notifying meanwhile goes on over the listeners it started with and
    no add or remove racing another is lost. Thread-safe."""

    __slots__ = ("_all", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._all: tuple[Callable[[str], None], ...] = ()

    def __len__(self) -> int:
        return len(self._all)

    def add(self, listener: Callable[[str], None]) -> None:
        with self._lock:
            self._all = (*self._all, listener)

    def remove(self, listener: Callable[[str], None]) -> None:
        """Drop every listener equal to ``listener`` (a bound method equals another of the
        same object and function); none: nothing to do."""
        with self._lock:
            self._all = tuple(each for each in self._all if each != listener)

    def notify(self, conversation_id: str) -> None:
        """Tell every listener; one that raises is logged and the rest still hear."""
        for listener in self._all:
            try:
                listener(conversation_id)
            except Exception:
                logger.exception("a delete listener failed for conversation {}", conversation_id)
