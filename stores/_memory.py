"""In-memory stores: a bounded LRU session cache, and a persistent store for tests."""

from __future__ import annotations

import datetime as dt
import threading
from collections import OrderedDict

from parlour.runtime.errors import ConversationNotFoundError
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
        self._records: dict[str, tuple[str, ConversationSummary, ConversationPersistenceSnapshot]]
        self._records = {}
        self._lock = threading.Lock()

    def create_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> None:
        key = require_id(snapshot)
        now = dt.datetime.now(dt.UTC)
        with self._lock:
            existing = self._records.get(key)
            if existing is not None and existing[0] != user_id:
                raise foreign(key, user_id)
            summary = ConversationSummary(
                conversation_id=key, title=snapshot.title, created_at=now, updated_at=now
            )
            self._records[key] = (user_id, summary, snapshot)

    def save_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> None:
        key = require_id(snapshot)
        with self._lock:
            existing = self._records.get(key)
            if existing is None:
                raise ConversationNotFoundError(f"Conversation {key} has no stored record.")
            if existing[0] != user_id:
                raise foreign(key, user_id)
            summary = ConversationSummary(
                conversation_id=key,
                title=existing[1].title,
                created_at=existing[1].created_at,
                updated_at=dt.datetime.now(dt.UTC),
            )
            self._records[key] = (user_id, summary, snapshot)

    def load(
        self, conversation_id: str, user_id: str, caller: object = None
    ) -> ConversationPersistenceSnapshot | None:
        with self._lock:
            existing = self._records.get(conversation_id)
        if existing is None:
            return None
        if existing[0] != user_id:
            raise foreign(conversation_id, user_id)
        return existing[2]

    def delete(self, conversation_id: str, user_id: str) -> bool:
        with self._lock:
            existing = self._records.get(conversation_id)
            if existing is None:
                return False
            if existing[0] != user_id:
                raise foreign(conversation_id, user_id)
            del self._records[conversation_id]
            return True

    def exists(self, conversation_id: str, user_id: str) -> bool:
        with self._lock:
            existing = self._records.get(conversation_id)
        return existing is not None and existing[0] == user_id

    def list_conversations(self, user_id: str) -> list[ConversationSummary]:
        with self._lock:
            return [s for owner, s, _ in self._records.values() if owner == user_id]
