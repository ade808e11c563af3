"""The two store seams: a durable ``PersistentStore`` and a fast ``SessionStore`` in front.

Each declares every capability a caller relies on, as an attribute or a method every store
has: a caller never probes a store for what it can do (no ``getattr``, no ``hasattr``).

Why this module is long: it is the whole seam, every member of both protocols with its
contract, and the handles and helpers a store that lacks a capability answers with.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import datetime as dt
import functools
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import msgspec

from parlour.runtime.errors import IllegalStateError
from parlour.runtime.snapshots import Appended, ConversationPersistenceSnapshot

from ._ids import require_id


class ConversationSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a user's conversation list."""

    conversation_id: str
    title: str
    created_at: dt.datetime
    updated_at: dt.datetime


class ConversationVersion(msgspec.Struct, frozen=True, kw_only=True):
    """One kept version of a conversation: its fencing version and when it was saved."""

    version: int
    saved_at: dt.datetime


Settle = Callable[[], int]
"""The handle ``save_context_later`` returns: it waits for the save, then returns the new
version or raises what ``save_context`` would have (calling it again answers alike)."""

Saver = Callable[[ConversationPersistenceSnapshot, str], int]  # a store's save_context


def saved_now(snapshot: ConversationPersistenceSnapshot, user_id: str, save: Saver) -> Settle:
    """``save_context_later`` for a store that does not defer: ``save(snapshot, user_id)``
    made now, answered as a deferring store answers. What needs no record (bad ids, a
    snapshot naming another user or that would not read back, a closed store) raises at
    once; what the record refuses (a stale version, a missing record, another user's) and
    a failed write come from the handle."""
    require_id(snapshot, user_id)
    try:
        version = save(snapshot, user_id)
    except (ValueError, IllegalStateError):  # the snapshot itself, or a closed store
        raise
    except Exception as exc:
        return functools.partial(_reraise, exc)
    return lambda: version


def _reraise(error: Exception) -> int:
    raise error


def no_appends(store: object) -> NotImplementedError:
    """The refusal of ``append_context`` by a store that takes no appends (``appends``
    False): its caller saves the whole snapshot instead."""
    return NotImplementedError(
        f"{type(store).__name__} takes no appends (appends is False); save the whole "
        "snapshot with save_context."
    )


class SaveFuture(asyncio.Future[Any]):
    """The answer of a save awaited on an event loop (``*_context_async``). Its awaiting
    task's cancellation does not cancel it (``cancel`` refuses): asyncio then delivers the
    ``CancelledError`` to the task once the save is answered, so the caller learns what the
    save did (``result()``) before it stops, and nothing the save may still read changes
    meanwhile. No thread and no extra future stand between the save and its caller."""

    def cancel(self, msg: Any = None) -> bool:
        return False

    def take(self, other: asyncio.Future[Any]) -> None:
        """Answer as ``other`` did (a done callback)."""
        error = other.exception()
        if error is not None:
            self.set_exception(error)
        else:
            self.set_result(other.result())


def saved_in_thread(
    snapshot: ConversationPersistenceSnapshot,
    user_id: str,
    save: Saver,
    in_thread: Callable[[Callable[[], Any]], cf.Future[Any]] | None = None,
) -> SaveFuture:
    """``create_context_async`` or ``save_context_async`` for a store that cannot queue a
    write (``defers_saves`` False): ``save(snapshot, user_id)`` in a thread, the store's own
    (``in_thread``) or else the running loop's default executor; the future raises what
    ``save`` raises."""
    loop = asyncio.get_running_loop()
    answer = SaveFuture(loop=loop)
    if in_thread is None:
        running = loop.run_in_executor(None, save, snapshot, user_id)
    else:
        running = asyncio.wrap_future(in_thread(functools.partial(save, snapshot, user_id)))
    running.add_done_callback(answer.take)
    return answer


@runtime_checkable
class PersistentStore(Protocol):
    """Durable conversations, bound to users, fenced by a version.

    Every conversation-addressed call takes the acting user id; another user's conversation
    raises ``PermissionError`` (``exists`` answers False, listings never show it). ``caller``
    is the thinker on whose behalf a read happens, for stores that dispatch reads as work;
    it may be None.

    Every call validates its ids first: a conversation id or user id that is empty, holds a
    NUL or a lone surrogate, or is too long (a conversation id at most 502 bytes of UTF-8,
    a user id 511: LMDB's key limit with room for the suffixes of a record's keys) raises
    ``ValueError`` naming the limit, and nothing is written. A snapshot that names a user
    other than the acting one is refused with ``PermissionError`` before anything is
    written. A record whose body, key and header disagree on its identity raises
    ``CorruptSnapshotError`` naming the conversation.

    Every record carries a fencing version: a create stores version 1 or, for an id that
    was deleted, one past the last version it ever had (an id's versions never restart);
    each save advances it by one. A snapshot names the version it was loaded at or last
    saved as (``snapshot.stored_version``); a save from any other version is refused with
    ``StaleVersionError`` and writes nothing.

    Capabilities, declared by every store (a class attribute does): ``shared`` (other
    processes write the same records), ``lets_go_while_waiting`` (its waits let the actors'
    turn gate go) and ``defers_saves`` (``save_context_later`` queues rather than saves at
    once). ``isinstance(obj, PersistentStore)`` checks that every member is there (not
    their signatures).

    Thread-safety: implementations are safe to call from any thread.
    """

    shared: bool
    """True when other processes (or machines) write the same records (``PostgresStore``):
    a ``ConversationService`` then checks a warm copy against the stored version before it
    lends it. False when this process is the only writer (``LmdbStore``: one writing
    process per directory; ``MemoryStore``)."""

    lets_go_while_waiting: bool
    """True when no call of the store keeps the calling thread's turn gate (the actors':
    one turn's own work at a time) while it waits: it never waits but for the CPU and
    short locks (``MemoryStore``), or lets the gate go around every wait (``LmdbStore``
    runs each wait of its group commit inside this package's ``_waiting.waiting()``). The
    agent gates its turns only when its store and session cache both say True. A store
    that waits on a socket, the disk or another process without letting go says False."""

    defers_saves: bool
    """True when ``save_context_later`` queues the update for a later commit without
    waiting (``LmdbStore``: it rides in the next group commit): the one case where a caller
    gains by deferring a save (``ConversationService``'s ``wait=False``). False when it
    saves at once (``MemoryStore``, ``PostgresStore``: ``saved_now``)."""

    appends: bool
    """True when ``append_context``, ``append_context_later`` and ``append_context_async``
    take a save that only appends (``snapshots.Appended``: new messages and ledger entries,
    the open-turn record) as such, writing the new records and the header and nothing of
    the rest (``LmdbStore``).
    False when they raise ``NotImplementedError`` (``no_appends``: ``MemoryStore``,
    ``PostgresStore``): the caller saves the whole snapshot instead."""

    def create_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> int:
        """Create the record (the first save), titled from the snapshot.

        Returns:
            The new record's version.

        Raises:
            ValueError: the snapshot has no conversation id, an invalid id, or it would not
                read back (a field holding a value its type cannot decode); nothing is written.
            PermissionError: the id exists and belongs to another user (or another user
                holds it reserved: ``reserve``), or the snapshot names another user.
        """
        ...

    def reserve(self, conversation_id: str, user_id: str, holder: object) -> None:
        """Reserve an id that has no record yet (a conversation minted and served live
        before its first save) for ``user_id`` while ``holder`` lives (held weakly): until
        then another user's ``create_context`` of the id raises ``PermissionError``, as for
        a record of someone else's. Within this store object; a record, once created, is
        its own guard.

        Raises:
            PermissionError: another user's live reservation holds the id.
        """
        ...

    def save_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> int:
        """Update an existing record; never creates one and never re-titles it.

        Returns:
            The record's new version.

        Raises:
            ValueError: the snapshot has no conversation id, an invalid id, or it would not
                read back (a field holding a value its type cannot decode); nothing is written.
            ConversationNotFoundError: no record holds the id (it was deleted).
            PermissionError: the record belongs to another user, or the snapshot names
                another user.
            StaleVersionError: the record has moved past ``snapshot.stored_version``.
        """
        ...

    def save_context_later(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> Settle:
        """``save_context``, not waited for: the handle waits for it. A store that defers
        (``defers_saves``) queues the update for its next commit and returns at once: the
        update is not durable until a commit holds it, and a later ``save_context`` of the
        same conversation (from the version the deferred one makes) commits after it. A
        store that does not saves at once (``saved_now``) and answers alike.

        Raises:
            ValueError: an invalid id, or a snapshot that would not read back (at once,
                nothing queued).
            PermissionError: the snapshot names another user (at once, nothing queued).
            IllegalStateError: the store is closed or read-only (at once).

        The handle raises the rest of what ``save_context`` would (``StaleVersionError``,
        ``ConversationNotFoundError``, ``PermissionError`` for another user's record, a
        failed write); nothing of the update is then written.
        """
        ...

    def append_context(self, appended: Appended, user_id: str, caller: object = None) -> int:
        """Update an existing record by what ``appended`` adds to its version
        ``appended.version``: the messages from index ``appended.start`` on, the ledger
        entries from ``appended.usage_start`` on, the open-turn record; the body, the title
        and the records before those indexes stay as that version left them (the caller
        proved them unchanged: ``ConversationContext.changes_since_save``). The new version
        reads back exactly as the whole snapshot's save would have left it.

        Returns:
            The record's new version.

        Raises:
            NotImplementedError: the store takes no appends (``appends`` is False).
            ValueError: an invalid id, a new message or entry that would not read back (at
                once), or an append whose indexes are not where that version ends.
            ConversationNotFoundError, PermissionError, StaleVersionError: as
                ``save_context``; nothing is written.
        """
        ...

    def append_context_later(
        self, appended: Appended, user_id: str, caller: object = None
    ) -> Settle:
        """``append_context``, queued as ``save_context_later`` queues a save: the handle
        waits for it and raises what the record refuses.

        Raises:
            NotImplementedError: the store takes no appends (``appends`` is False).
            ValueError: an invalid id, or a new message or entry that would not read back
                (at once, nothing queued).
            IllegalStateError: the store is closed or read-only (at once).
        """
        ...

    def append_context_async(
        self, appended: Appended, user_id: str, caller: object = None
    ) -> SaveFuture:
        """``append_context`` from a running event loop, as ``save_context_async``.

        Raises:
            NotImplementedError: the store takes no appends (``appends`` is False).
            What ``append_context`` raises: from the call itself (bad ids, a record that
            would not read back, a closed store) or from the awaitable.
        """
        ...

    def create_context_async(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> SaveFuture:
        """``create_context`` from a running event loop, never blocking it: call it on the
        loop's thread and await the answer (the new version). Cancelling the awaiting task
        does not cancel the save: the task's ``CancelledError`` comes once it is answered
        (``SaveFuture``). A store that defers
        (``defers_saves``) plans the write on the loop, queues it and completes a future
        on the loop once the commit holding it is durable (``LmdbStore``: its commit
        thread leads when no thread does); the snapshot is read by then. A store that
        does not runs ``create_context`` in a thread (``saved_in_thread``).

        Raises:
            What ``create_context`` raises: from the call itself (a store that defers
            refuses bad ids, a snapshot naming another user, a closed or read-only store
            at once, nothing queued) or from the awaitable; nothing is written then.
        """
        ...

    def save_context_async(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> SaveFuture:
        """``save_context`` from a running event loop, as ``create_context_async``: the
        record's new version, or what ``save_context`` raises (``StaleVersionError``,
        ``ConversationNotFoundError``, ...), nothing written then."""
        ...

    def load(
        self, conversation_id: str, user_id: str, caller: object = None
    ) -> ConversationPersistenceSnapshot | None:
        """The stored snapshot (its ``stored_version`` the record's), or None when there is
        none.

        Raises:
            PermissionError: the record belongs to another user.
            CorruptSnapshotError: the record does not decode.
        """
        ...

    def version_of(self, conversation_id: str, user_id: str) -> int | None:
        """The stored record's current version; None when there is none.

        Raises:
            PermissionError: the record belongs to another user.
        """
        ...

    def delete(self, conversation_id: str, user_id: str) -> bool:
        """Remove the record; True when one was removed. Every delete listener hears of it
        after the removal is durable."""
        ...

    def exists(self, conversation_id: str, user_id: str) -> bool:
        """True when the record exists and belongs to ``user_id``."""
        ...

    def list_conversations(
        self, user_id: str, *, limit: int | None = None, after: ConversationSummary | None = None
    ) -> list[ConversationSummary]:
        """The user's conversations, most recently updated first, ties by id.

        ``limit`` caps how many are returned; ``after`` is the last summary of the previous
        page, and the page starts after its place in that order (keyset paging: a
        conversation updated between pages moves to the front, ahead of a walk already
        under way, so the walk never shows it twice).

        Raises:
            ValueError: an invalid user id, or a negative limit.
        """
        ...

    def get_version_history(self, conversation_id: str, user_id: str) -> list[ConversationVersion]:
        """The kept versions (every successful save is one, numbered by its fencing
        version), most recent first; empty when there is no such conversation. A delete
        removes them with the conversation.

        Raises:
            PermissionError: the record belongs to another user.
            NotImplementedError: the store keeps no versions (``LmdbStore(history=False)``);
                the message names the setting. Never an empty list for a saved
                conversation.
        """
        ...

    def load_version(
        self, conversation_id: str, version: int | dt.datetime, user_id: str
    ) -> ConversationPersistenceSnapshot | None:
        """The conversation exactly as it was at ``version`` (a version number, or a time:
        the version current then), stamped with that version; None when the conversation or
        that version is not kept.

        Raises:
            PermissionError: the record belongs to another user.
            CorruptSnapshotError: the version does not decode.
            NotImplementedError: the store keeps no versions, as ``get_version_history``.
        """
        ...

    def add_delete_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(conversation_id)`` after every delete, whoever asked for it, so a
        cache in front of the store never serves a deleted conversation. A listener that
        raises is logged and does not fail the delete."""
        ...

    def remove_delete_listener(self, listener: Callable[[str], None]) -> None:
        """Stop calling ``listener`` (one equal to a listener given to
        ``add_delete_listener``; one never added is ignored). A service removes its own
        when it stops."""
        ...

    def close(self) -> None:
        """Commit what is queued (a deferred save included), then release what the store
        holds (files, locks, connections). Idempotent. What a call after it does is the
        store's: ``LmdbStore`` and ``PostgresStore`` raise ``IllegalStateError``;
        ``MemoryStore``, which holds nothing to release, goes on answering."""
        ...


@runtime_checkable
class SessionStore(Protocol):
    """A cache consulted before the persistent store. It must never serve a snapshot older
    than the last successful save of the same conversation, nor one of another user (``get``
    answers None: the service then reads the persistent store). It may drop any entry at
    any time.

    Thread-safety: implementations are safe to call from any thread.
    """

    lets_go_while_waiting: bool
    """As ``PersistentStore.lets_go_while_waiting``: True when its waits let the turn gate
    go, or it never waits but for the CPU (``MemorySessionCache``)."""

    def get(self, conversation_id: str, user_id: str) -> ConversationPersistenceSnapshot | None: ...

    def put(self, snapshot: ConversationPersistenceSnapshot) -> None: ...

    def delete(self, conversation_id: str) -> None: ...
