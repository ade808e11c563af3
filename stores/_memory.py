"""In-memory stores: a bounded LRU session cache, and a persistent store for tests."""

from __future__ import annotations

import datetime as dt
import threading
from collections import OrderedDict
from collections.abc import Callable

import msgspec
from loguru import logger

from parlour.runtime.errors import ConversationNotFoundError, StaleVersionError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot
from parlour.stores._protocols import ConversationSummary


def require_id(snapshot: ConversationPersistenceSnapshot) -> str:
    if snapshot.conversation_id is None:
        raise ValueError("Cannot store a conversation snapshot whose conversation_id is None.")
    return snapshot.conversation_id


def foreign(conversation_id: str, user_id: str) -> PermissionError:
    return PermissionError(f"User {user_id} does not own conversation {conversation_id}")


class MemorySessionCache:
    """A bounded LRU of snapshots. Thread-safe (one short lock around the dict)."""

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
        key = require_id(snapshot)
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

    Thread-safe. Keeps the owner and title from the first save, as the LMDB store does.
    """

    def __init__(self) -> None:
        self._records: dict[str, _Record] = {}
        self._last_versions: dict[str, int] = {}  # survives deletes: versions never restart
        self._listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()

    def create_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> int:
        key = require_id(snapshot)
        now = dt.datetime.now(dt.UTC)
        with self._lock:
            existing = self._records.get(key)
            if existing is not None and existing.user_id != user_id:
                raise foreign(key, user_id)
            version = self._last_versions.get(key, 0) + 1
            summary = ConversationSummary(
                conversation_id=key, title=snapshot.title, created_at=now, updated_at=now
            )
            self._store(key, _Record(user_id, summary, snapshot), version)
            return version

    def save_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> int:
        key = require_id(snapshot)
        with self._lock:
            existing = self._records.get(key)
            if existing is None:
                raise ConversationNotFoundError(f"Conversation {key} has no stored record.")
            if existing.user_id != user_id:
                raise foreign(key, user_id)
            current = self._last_versions[key]
            if snapshot.stored_version != current:
                raise StaleVersionError(key, snapshot.stored_version, current)
            summary = msgspec.structs.replace(existing.summary, updated_at=dt.datetime.now(dt.UTC))
            self._store(key, _Record(user_id, summary, snapshot), current + 1)
            return current + 1

    def _store(self, key: str, record: _Record, version: int) -> None:
        # a private copy stamped with its version: the caller's snapshot stays the caller's
        record.snapshot = msgspec.structs.replace(record.snapshot, stored_version=version)
        self._records[key] = record
        self._last_versions[key] = version

    def load(
        self, conversation_id: str, user_id: str, caller: object = None
    ) -> ConversationPersistenceSnapshot | None:
        with self._lock:
            existing = self._records.get(conversation_id)
        if existing is None:
            return None
        if existing.user_id != user_id:
            raise foreign(conversation_id, user_id)
        return msgspec.structs.replace(existing.snapshot)

    def version_of(self, conversation_id: str, user_id: str) -> int | None:
        with self._lock:
            existing = self._records.get(conversation_id)
        if existing is None:
            return None
        if existing.user_id != user_id:
            raise foreign(conversation_id, user_id)
        return existing.snapshot.stored_version

    def delete(self, conversation_id: str, user_id: str) -> bool:
        with self._lock:
            existing = self._records.get(conversation_id)
            if existing is None:
                return False
            if existing.user_id != user_id:
                raise foreign(conversation_id, user_id)
            del self._records[conversation_id]
        notify_deleted(self._listeners, conversation_id)
        return True

    def exists(self, conversation_id: str, user_id: str) -> bool:
        with self._lock:
            existing = self._records.get(conversation_id)
        return existing is not None and existing.user_id == user_id

    def list_conversations(self, user_id: str) -> list[ConversationSummary]:
        """The user's conversations, most recently updated first."""
        with self._lock:
            found = [r.summary for r in self._records.values() if r.user_id == user_id]
        return sorted(found, key=lambda s: s.updated_at, reverse=True)

    def add_delete_listener(self, listener: Callable[[str], None]) -> None:
        self._listeners.append(listener)


class _Record:
    __slots__ = ("snapshot", "summary", "user_id")

    def __init__(
        self, user_id: str, summary: ConversationSummary, snapshot: ConversationPersistenceSnapshot
    ) -> None:
        self.user_id = user_id
        self.summary = summary
        self.snapshot = snapshot


def notify_deleted(listeners: list[Callable[[str], None]], conversation_id: str) -> None:
    """Tell every delete listener; one that raises is logged and the rest still hear."""
    for listener in listeners:
        try:
            listener(conversation_id)
        except Exception:
            logger.exception("a delete listener failed for conversation {}", conversation_id)
