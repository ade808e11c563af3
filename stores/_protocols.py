"""The two store seams: a durable ``PersistentStore`` and a fast ``SessionStore`` in front."""

from __future__ import annotations

import datetime as dt
from typing import Protocol

import msgspec

from parlour.runtime.snapshots import ConversationPersistenceSnapshot


class ConversationSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a user's conversation list."""

    conversation_id: str
    title: str
    created_at: dt.datetime
    updated_at: dt.datetime


class PersistentStore(Protocol):
    """Durable conversations, bound to users.

    Every conversation-addressed call takes the acting user id; another user's conversation
    raises ``PermissionError`` (``exists`` answers False). ``caller`` is the thinker on whose
    behalf a read happens, for stores that dispatch reads as work; it may be None.
    Thread-safety: implementations are safe to call from any thread.
    """

    def create_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> None:
        """Create the record (the first save), titled from the snapshot.

        Raises:
            ValueError: the snapshot has no conversation id.
            PermissionError: the id exists and belongs to another user.
        """
        ...

    def save_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> None:
        """Update an existing record; never creates one and never re-titles it.

        Raises:
            ValueError: the snapshot has no conversation id.
            ConversationNotFoundError: no record holds the id (it was deleted).
            PermissionError: the record belongs to another user.
        """
        ...

    def load(
        self, conversation_id: str, user_id: str, caller: object = None
    ) -> ConversationPersistenceSnapshot | None:
        """The stored snapshot, or None when there is none.

        Raises:
            PermissionError: the record belongs to another user.
            CorruptSnapshotError: the record does not decode.
        """
        ...

    def delete(self, conversation_id: str, user_id: str) -> bool:
        """Remove the record; True when one was removed."""
        ...

    def exists(self, conversation_id: str, user_id: str) -> bool: ...

    def list_conversations(self, user_id: str) -> list[ConversationSummary]: ...


class SessionStore(Protocol):
    """A cache consulted before the persistent store. It must never serve a snapshot older
    than the last successful save of the same conversation."""

    def get(self, conversation_id: str, user_id: str) -> ConversationPersistenceSnapshot | None: ...

    def put(self, snapshot: ConversationPersistenceSnapshot) -> None: ...

    def delete(self, conversation_id: str) -> None: ...
