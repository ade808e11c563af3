"""PostgresStore: a ``PersistentStore`` on a PostgreSQL database, for many processes at once.

psycopg 3 and its connection pool are imported when a store is made, not when this module
is: ``parlour.stores`` imports without the ``parlour[postgres]`` extra installed.

Why this module is long: it is the store's whole public face, one short method per
operation of ``PersistentStore`` (each documenting its contract); the SQL, the database and
the row codecs live in their own modules.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from parlour.runtime.errors import (
    ConversationNotFoundError,
    StaleVersionError,
    not_owned,
)
from parlour.runtime.snapshots import Appended, ConversationPersistenceSnapshot

from .._body import Body, body_after
from .._ids import require_id, user_key
from .._inflight import Creates
from .._memory import DeleteListeners
from .._protocols import (
    ConversationSummary,
    ConversationVersion,
    SaveFuture,
    Settle,
    no_appends,
    saved_in_thread,
    saved_now,
)
from .._records import decode_turn, encode_turn
from .._reserved import Reservations
from . import _sql as sql
from ._database import Database
from ._support import Remembered, checked, decode_row, encode_messages, encode_usage

_PRUNE_EVERY = 64  # a save whose new version is a multiple of this prunes its conversation


class PostgresStore:
    """A ``PersistentStore`` on PostgreSQL, safe for many stores in many processes at once.

    Every save is a version (numbered by the fencing version) kept as what it wrote: the
    snapshot without its messages, and the messages from the first that changed. Versions
    past the newest ``keep_versions``, or saved longer than ``keep_for`` ago, are pruned
    (the current version always stays): by ``prune()``, and by every 64th save of a
    conversation for that conversation.

    Args:
        conninfo: a libpq connection string or URL. The tables live in the first schema of
            its ``search_path``; the store creates or upgrades them.
        max_connections: the pool's size (one connection per concurrent call).
        keep_versions: how many of a conversation's newest versions to keep (None: all).
        keep_for: how long to keep a version (None: no age limit).
        now: the wall clock that stamps saves and ages versions.
        timeout: seconds to wait for the database when opening and for a pooled connection.
        remembered: of how many conversations to remember the messages last written or read
            (a save of one of them writes only what changed; another writes every message).

    Raises:
        ImportError: psycopg 3 and psycopg_pool are not installed (``parlour[postgres]``).
        IllegalStateError: the database holds tables of a newer parlour.
        psycopg_pool.PoolTimeout: the database cannot be reached in ``timeout`` (also from
            any call; ``psycopg.OperationalError`` when a connection breaks mid-call).

    Thread-safety: every method may be called from any thread; after ``close()`` each
    raises ``IllegalStateError``.
    """

    shared = True  # many processes save: a warm copy is checked against the stored version
    lets_go_while_waiting = False  # it waits on the server's socket holding the turn gate
    defers_saves = False  # each write is one round trip of its own: nothing to share
    appends = False  # an append is refused: the caller saves the whole snapshot

    def __init__(
        self,
        conninfo: str,
        *,
        max_connections: int = 8,
        keep_versions: int | None = 100,
        keep_for: dt.timedelta | None = None,
        now: Callable[[], dt.datetime] | None = None,
        timeout: float = 30.0,
        remembered: int = 4096,
    ) -> None:
        if keep_versions is not None and keep_versions < 1:
            raise ValueError(f"keep_versions must be at least 1 (or None), got {keep_versions}.")
        self._keep_versions, self._keep_for = keep_versions, keep_for
        self._now = now or (lambda: dt.datetime.now(dt.UTC))
        self._db = Database(conninfo, max_connections, timeout)
        self._known = Remembered(remembered)
        self._listeners = DeleteListeners()
        self._creates = Creates()
        self._reserved = Reservations()

    # -- writes -----------------------------------------------------------------------------

    def create_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> int:
        """Create the record or, for the user's own existing id, save over it (keeping its
        title and creation time).

        Returns:
            The new version: 1, or one past the last version the id ever had.

        Raises:
            ValueError: the snapshot has no usable id, or it would not read back.
            PermissionError: the id belongs to another user, or the snapshot names another
                user than ``user_id``.
        """
        self._reserved.check(snapshot.conversation_id, user_id)
        with self._creates.creating(snapshot.conversation_id):  # an update waits for it
            return self._create(snapshot, user_id)

    def reserve(self, conversation_id: str, user_id: str, holder: object) -> None:
        self._reserved.reserve(checked(conversation_id, user_id), user_id, holder)

    def _create(self, snapshot: ConversationPersistenceSnapshot, user_id: str) -> int:
        cid = require_id(snapshot, user_id).decode()
        body = body_after(snapshot, None)
        params = self._write_params(snapshot, user_id, (0, 0), body)
        params["title"] = snapshot.title
        version = self._db.version(sql.CREATE, params)
        if version is None:
            raise not_owned(cid, user_id)
        self._known.remember(cid, version, snapshot.messages, snapshot.usage, body)
        return version

    def save_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> int:
        """Save a new version from ``snapshot.stored_version``; writes only the messages
        from the first that changed since this store last wrote or read that version.

        Returns:
            The record's new version.

        Raises:
            ValueError: the snapshot has no usable id, or it would not read back.
            ConversationNotFoundError: no record holds the id (it was deleted).
            PermissionError: the record belongs to another user, or the snapshot names
                another user than ``user_id``.
            StaleVersionError: the record has moved past ``snapshot.stored_version``.
        """
        if self._creates.under_way:  # a create of this id under way: the update follows it
            self._creates.wait_for(snapshot.conversation_id)
        cid = require_id(snapshot, user_id).decode()
        body = body_after(snapshot, self._known.body(cid))  # the last one's, when the same
        params = self._write_params(snapshot, user_id, self._known.unchanged(cid, snapshot), body)
        params["expected"] = snapshot.stored_version
        version = self._db.version(sql.SAVE, params)
        if version is None:
            raise self._refusal(cid, user_id, snapshot.stored_version)
        self._known.remember(cid, version, snapshot.messages, snapshot.usage, body)
        limited = self._keep_versions is not None or self._keep_for is not None
        if limited and version % _PRUNE_EVERY == 0:
            self.prune(cid)
        return version

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
        """``create_context`` on one of the store's threads, as many as its connections
        (it does not queue writes)."""
        return saved_in_thread(snapshot, user_id, self.create_context, self._db.in_thread)

    def save_context_async(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> SaveFuture:
        """``save_context`` on one of the store's threads, as many as its connections
        (it does not queue writes)."""
        return saved_in_thread(snapshot, user_id, self.save_context, self._db.in_thread)

    def _write_params(
        self,
        snapshot: ConversationPersistenceSnapshot,
        user_id: str,
        starts: tuple[int, int],
        body: Body,
    ) -> dict[str, Any]:
        """The parameters of a write that keeps the first ``starts`` messages and ledger
        entries of the stored version and writes the rest."""
        messages, usage = snapshot.messages, snapshot.usage
        start, ustart = starts
        cid = str(snapshot.conversation_id)
        return {
            "cid": snapshot.conversation_id,
            "user": user_id,
            "now": self._now(),
            "count": len(messages),
            "body": body.data,
            "start": start,
            "messages": encode_messages(cid, messages, start),
            "ucount": len(usage),
            "ustart": ustart,
            "usage": encode_usage(cid, usage, ustart),
            "turn": encode_turn(snapshot.turn),
        }

    def _refusal(self, cid: str, user_id: str, expected: int) -> Exception:
        """Why a conditional save wrote nothing."""
        head = self._db.head(cid)
        if head is None:
            return ConversationNotFoundError(
                f"Conversation {cid} has no stored record; it may have been deleted. "
                "The save was refused rather than resurrect it."
            )
        if head[0] != user_id:
            return not_owned(cid, user_id)
        return StaleVersionError(cid, expected, head[1])

    def delete(self, conversation_id: str, user_id: str) -> bool:
        """Remove the record and its history; True when one was removed. Every delete
        listener hears of it after the removal is committed.

        Raises:
            ValueError: the conversation id is empty, or an id holds NUL.
            PermissionError: the record belongs to another user.
        """
        cid = checked(conversation_id, user_id)
        if self._db.version(sql.DELETE, {"cid": cid, "user": user_id}) is None:
            if self._owner(cid) is not None:
                raise not_owned(cid, user_id)
            return False
        self._known.forget(cid)
        self._listeners.notify(cid)
        return True

    def add_delete_listener(self, listener: Callable[[str], None]) -> None:
        self._listeners.add(listener)

    def remove_delete_listener(self, listener: Callable[[str], None]) -> None:
        self._listeners.remove(listener)

    def prune(self, conversation_id: str | None = None) -> int:
        """Apply the retention policy to one conversation, or to all. Safe while the store
        (and others on the database) are in use: it removes only what no kept version reads.

        Returns:
            How many versions were removed.
        """
        cutoff = None if self._keep_for is None else self._now() - self._keep_for
        params = {"cid": conversation_id, "keep": self._keep_versions, "cutoff": cutoff}
        with self._db.connection() as conn, conn.transaction():
            removed = conn.execute(sql.PRUNE_VERSIONS, params).rowcount
            conn.execute(sql.PRUNE_MESSAGES, params)
            conn.execute(sql.PRUNE_USAGE, params)
        return int(removed)

    # -- reads ------------------------------------------------------------------------------

    def load(
        self, conversation_id: str, user_id: str, caller: object = None
    ) -> ConversationPersistenceSnapshot | None:
        """The stored snapshot, stamped with its version; None when there is none.

        Raises:
            ValueError: the conversation id is empty, or an id holds NUL.
            PermissionError: the record belongs to another user.
            CorruptSnapshotError: the record does not decode, or names another conversation
                or owner than its row.
        """
        read = self._read(sql.LOAD, conversation_id, user_id, {})
        if read is None:
            return None
        snapshot, rows = read
        usage = snapshot.usage if rows else None  # a ledger in the body: no rows to extend
        self._known.remember(conversation_id, snapshot.stored_version, snapshot.messages, usage)
        return snapshot

    def load_version(
        self, conversation_id: str, version: int | dt.datetime, user_id: str
    ) -> ConversationPersistenceSnapshot | None:
        """The conversation exactly as it was at ``version`` (a version number, or a time:
        the version current then), stamped with that version; None when the conversation or
        that version is not held (never saved, or pruned).

        Raises:
            ValueError: the conversation id is empty, or an id holds NUL.
            PermissionError: the record belongs to another user.
            CorruptSnapshotError: the version does not decode.
        """
        if isinstance(version, dt.datetime):
            read = self._read(sql.LOAD_AS_OF, conversation_id, user_id, {"at": version})
        else:
            read = self._read(sql.LOAD_VERSION, conversation_id, user_id, {"version": version})
        return None if read is None else read[0]

    def get_version_history(self, conversation_id: str, user_id: str) -> list[ConversationVersion]:
        """The kept versions, most recent first; empty when there is no such conversation.

        Raises:
            ValueError: the conversation id is empty, or an id holds NUL.
            PermissionError: the record belongs to another user.
        """
        cid = checked(conversation_id, user_id)
        rows = self._db.rows(sql.HISTORY, {"cid": cid, "user": user_id})
        if rows and rows[0][0] != user_id:
            raise not_owned(cid, user_id)
        return [
            ConversationVersion(version=r[1], saved_at=r[2].astimezone(dt.UTC))
            for r in rows
            if r[1] is not None
        ]

    def version_of(self, conversation_id: str, user_id: str) -> int | None:
        """The record's current version; None when there is none.

        Raises:
            ValueError: the conversation id is empty, or an id holds NUL.
            PermissionError: the record belongs to another user.
        """
        head = self._db.head(checked(conversation_id, user_id))
        if head is None:
            return None
        if head[0] != user_id:
            raise not_owned(conversation_id, user_id)
        return head[1]

    def exists(self, conversation_id: str, user_id: str) -> bool:
        """Whether the user owns a record of this id (False for another user's)."""
        params = {"cid": checked(conversation_id, user_id), "user": user_id}
        return bool(self._db.rows(sql.EXISTS, params))

    def list_conversations(
        self,
        user_id: str,
        *,
        limit: int | None = None,
        after: str | ConversationSummary | None = None,
    ) -> list[ConversationSummary]:
        """The user's conversations, most recently updated first, through the owner index.

        Args:
            limit: at most this many.
            after: continue after this conversation: a summary from an earlier page (its
                position as listed), or the id of one of the user's conversations (its
                position now).

        Raises:
            ValueError: ``after`` names no conversation of this user, ``limit`` < 0, or the
                user id holds NUL.
        """
        user_key(user_id)
        if limit is not None and limit < 0:
            raise ValueError(f"A listing limit cannot be negative, got {limit}.")
        params: dict[str, Any] = {"user": user_id, "limit": limit, "at": None, "after": None}
        if after is not None:
            params["at"], params["after"] = self._position(after, user_id)
        rows = self._db.rows(sql.LIST, params)
        return [
            ConversationSummary(
                conversation_id=r[0],
                title=r[1],
                created_at=r[2].astimezone(dt.UTC),
                updated_at=r[3].astimezone(dt.UTC),
            )
            for r in rows
        ]

    def _position(self, after: str | ConversationSummary, user_id: str) -> tuple[dt.datetime, str]:
        if isinstance(after, ConversationSummary):
            return after.updated_at, after.conversation_id
        rows = self._db.rows(sql.POSITION, {"cid": checked(after, user_id), "user": user_id})
        if not rows:
            raise ValueError(f"User {user_id} has no conversation {after} to list after.")
        return rows[0][0], after

    def _read(
        self, query: str, conversation_id: str, user_id: str, extra: dict[str, Any]
    ) -> tuple[ConversationPersistenceSnapshot, bool] | None:
        """The version ``query`` selects, and whether its ledger came from ledger rows."""
        cid = checked(conversation_id, user_id)
        rows = self._db.rows(query, {"cid": cid, "user": user_id, **extra})
        if not rows:
            return None
        owner, version, count, body, messages, ucount, entries, turn = rows[0]
        if owner != user_id:
            raise not_owned(cid, user_id)
        if body is None:
            return None
        usage = None if ucount is None else (ucount, entries or [])
        snapshot = decode_row(cid, owner, version, body, messages, count, usage)
        snapshot.turn = decode_turn(cid, turn)
        return snapshot, usage is not None

    # -- plumbing ---------------------------------------------------------------------------

    def _owner(self, cid: str) -> str | None:
        head = self._db.head(cid)
        return None if head is None else head[0]

    def close(self) -> None:
        """Let the async saves under way finish, then close the pool's connections.
        Idempotent."""
        self._db.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
