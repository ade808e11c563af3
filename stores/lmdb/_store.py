"""LmdbStore: the default persistent store, embedded, on a directory.

Writes go through the group commit (``_group_commit``): concurrent writers share one
transaction and one fsync, each answered after the commit holding its write is on disk.
Reads run in the caller's thread on LMDB's lock-free MVCC snapshots. One process writes a
directory (``_lock``); any number may read it with ``readonly=True``.

The store is the public face of its collaborators, each with its own state: the open
directory (``_directory.Directory``: the environment, the read gate, the group commit),
what its writes do (``_writes.Writes``), the version history under its retention
(``_history.History``) and the administration (``_maintenance.Maintenance``).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from parlour.runtime.snapshots import Appended, ConversationPersistenceSnapshot

from .._ids import conversation_key, order_bytes, user_key
from .._inflight import Creates
from .._memory import DeleteListeners
from .._protocols import ConversationSummary, ConversationVersion, SaveFuture
from .._records import Header
from .._reserved import Reservations
from . import _reads, _versions
from ._directory import Directory
from ._history import History
from ._layout import QuarantinedRecord
from ._maintenance import Maintenance, StoreStatistics
from ._writes import Writes


class LmdbStore:
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
        StoreInUseError: another writer holds the directory (the message names its pid).
        IllegalStateError: the directory's layout is newer than this code (or, read-only,
            older).
        FileNotFoundError: ``readonly`` and there is no store at ``path``.
        ValueError: ``keep_versions`` is below 1.

    Thread-safety: every method may be called from any thread. ``close()`` commits the
    writes queued before it, and every later call raises ``IllegalStateError``.
    """

    shared = False  # one writing process per directory: warm copies need no check
    lets_go_while_waiting = True  # its commits' waits run in ``_waiting.waiting()``
    defers_saves = True  # ``save_context_later`` rides in the next group commit
    appends = True  # an append writes its new records and the header, nothing else

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
        self.path = Path(path)
        self.readonly = readonly
        self._directory = Directory(
            self.path,
            map_size=map_size,
            sync=sync,
            max_batch=max_batch,
            remembered=remembered,
            readonly=readonly,
        )
        self._dbs = self._directory.dbs
        self._listeners = DeleteListeners()
        self._creates = Creates()
        self._reserved = Reservations()
        self._history = History(
            self._directory,
            _versions.Retention.of(keep_versions, keep_for, self._now) if history else None,
        )
        self._writes = Writes(self._dbs, self._directory.book, self._history, self._now)
        self._maintenance = Maintenance(self._directory, self._listeners)

    # -- writes -----------------------------------------------------------------------------

    def create_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> int:
        self._reserved.check(snapshot.conversation_id, user_id)
        with self._creates.creating(snapshot.conversation_id):  # an update waits for it
            return int(self._directory.submit(*self._writes.create(snapshot, user_id)))

    def reserve(self, conversation_id: str, user_id: str, holder: object) -> None:
        conversation_key(conversation_id)
        user_key(user_id)
        self._reserved.reserve(conversation_id, user_id, holder)

    def save_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> int:
        if self._creates.under_way:  # a create of this id under way: the update follows it
            self._creates.wait_for(snapshot.conversation_id)
        return int(self._directory.submit(*self._writes.update(snapshot, user_id)))

    def save_context_later(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> Callable[[], int]:
        """``save_context`` queued for the next commit, not waited for (``PersistentStore``
        says how); bad ids, a snapshot naming another user, a closed or read-only store
        raise at once."""
        if self._creates.under_way:
            self._creates.wait_for(snapshot.conversation_id)
        slot = self._directory.defer(*self._writes.update(snapshot, user_id, queued=True))
        return partial(self._directory.commits.settle, slot)

    def append_context(self, appended: Appended, user_id: str, caller: object = None) -> int:
        if self._creates.under_way:
            self._creates.wait_for(appended.conversation_id)
        return int(self._directory.submit(*self._writes.append(appended, user_id)))

    def append_context_later(
        self, appended: Appended, user_id: str, caller: object = None
    ) -> Callable[[], int]:
        """``append_context`` queued for the next commit, as ``save_context_later`` queues a
        save."""
        if self._creates.under_way:
            self._creates.wait_for(appended.conversation_id)
        slot = self._directory.defer(*self._writes.append(appended, user_id))
        return partial(self._directory.commits.settle, slot)

    def create_context_async(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> SaveFuture:
        """``create_context`` from the running loop: planned and encoded here, queued, and
        committed on this loop after its turn (or by a thread leading meanwhile);
        the future completes on this loop once the commit is durable. An update of the
        same id queued after this call commits after it (the queue keeps its order)."""
        self._reserved.check(snapshot.conversation_id, user_id)
        with self._creates.creating(snapshot.conversation_id):  # until queued: then in order
            return self._directory.submit_async(*self._writes.create(snapshot, user_id))

    def save_context_async(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> SaveFuture:
        """``save_context`` from the running loop, as ``create_context_async``. A create of
        the same id under way in another thread is waited for here (on the loop): an owner
        never races its own create, so only a foreign writer of the id can cause it."""
        if self._creates.under_way:
            self._creates.wait_for(snapshot.conversation_id)
        return self._directory.submit_async(*self._writes.update(snapshot, user_id))

    def append_context_async(
        self, appended: Appended, user_id: str, caller: object = None
    ) -> SaveFuture:
        """``append_context`` from the running loop, as ``save_context_async``."""
        if self._creates.under_way:
            self._creates.wait_for(appended.conversation_id)
        return self._directory.submit_async(*self._writes.append(appended, user_id))

    def delete(self, conversation_id: str, user_id: str) -> bool:
        removed = bool(self._directory.submit(self._writes.delete(conversation_id, user_id), 0))
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

        return self._directory.view(read)

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
        return self._directory.view(lambda txn: self._head(txn, key, conversation_id, user_id))

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
        return self._directory.view(
            lambda txn: _reads.listing(txn, self._dbs, owner, user_id, limit, start)
        )

    # -- history ----------------------------------------------------------------------------

    def get_version_history(self, conversation_id: str, user_id: str) -> list[ConversationVersion]:
        """The kept versions of the conversation, most recent first; empty when there is no
        such conversation.

        Raises:
            ValueError: an invalid id.
            PermissionError: the record belongs to another user.
            CorruptSnapshotError: the record's header does not decode.
        """
        return self._history.versions(conversation_id, user_id)

    def load_version(
        self, conversation_id: str, version: int | dt.datetime, user_id: str
    ) -> ConversationPersistenceSnapshot | None:
        """The conversation exactly as it was at ``version`` (a version number, or a time:
        the version current then), stamped with that version; None when the conversation or
        that version is not kept.

        Raises:
            ValueError: an invalid id.
            PermissionError: the record belongs to another user.
            CorruptSnapshotError: the version's records do not decode.
        """
        return self._history.load_version(conversation_id, version, user_id)

    def prune(self, conversation_id: str | None = None) -> int:
        """Apply the retention policy to one conversation, or to all (one write per
        conversation, so saves go on between them). Safe while the store is in use: the
        oldest kept version becomes a checkpoint before older ones go. A version it cannot
        rebuild (a damaged record) never stops it, nor the save whose prune meets it: the
        run of records that version depends on is moved into quarantine (``quarantined``),
        logged as a ``CorruptSnapshotError`` naming the conversation and version, and the
        prune goes on; so does a conversation whose header does not read (logged).

        Returns:
            How many versions were removed (quarantined ones included).

        Raises:
            IllegalStateError: the store is read-only or closed, or keeps no history.
        """
        return self._history.prune(conversation_id)

    # -- administration -----------------------------------------------------------------------

    def statistics(self) -> StoreStatistics:
        return self._maintenance.statistics()

    def damaged(self) -> list[str]:
        """The ids of every conversation whose header does not decode: records no user call
        can load or remove (their owner cannot be read). ``quarantine`` moves them away."""
        return self._maintenance.damaged()

    def quarantine(self, conversation_id: str) -> bool:
        """Move every record of a conversation, damaged or not, into the quarantine database
        as raw bytes (see ``quarantined``), whoever owns it. An administrative operation:
        it is no part of ``PersistentStore``. Delete listeners hear of it; the id's next
        version is past any it had. True when there was a record."""
        return self._maintenance.quarantine(conversation_id)

    def quarantined(self, conversation_id: str) -> list[QuarantinedRecord]:
        """Every quarantined record of the conversation, oldest first, exactly as stored."""
        return self._maintenance.quarantined(conversation_id)

    def backup(self, destination: str | os.PathLike[str]) -> Path:
        """Copy the store, compacted, into ``destination`` (created if missing), consistent
        as of one moment while the store is in use: open it with ``LmdbStore(destination)``.

        Returns:
            The destination directory.

        Raises:
            FileExistsError: ``destination`` already holds a store.
            NotADirectoryError: ``destination`` is a file.
            IllegalStateError: the store is closed.
        """
        return self._maintenance.backup(destination)

    def undecodable(self) -> list[tuple[str, str]]:
        """Every conversation whose current record does not decode, with the reason, in id
        order: (id, reason). Reads every record in one snapshot (an administrative scan:
        ``quarantine`` moves what it finds).

        Raises:
            IllegalStateError: the store is closed.
        """
        return self._maintenance.undecodable()

    def damaged_versions(self) -> list[tuple[str, int, str]]:
        """Every recorded version that does not read (a damaged version record, or one its
        replay passes through), as (id, version, why), in id and version order, read in one
        snapshot; ``quarantine_damaged_versions`` moves them aside. An administrative scan
        (``parlour fsck``): every kept version is rebuilt and decoded."""
        return self._maintenance.damaged_versions()

    def quarantine_damaged_versions(self, conversation_id: str) -> list[int]:
        """Move the version records of the conversation that do not read into quarantine,
        raw (``quarantined`` gives them back, as a record's ``versions``), whoever owns it;
        the current record and every readable version stay. Returns the versions moved."""
        return self._maintenance.quarantine_damaged_versions(conversation_id)

    def interrupted(self) -> list[tuple[str, str, int]]:
        """Every conversation whose current record holds a tool call no later result
        answers, as (id, owner, how many such calls), in id order, read in one snapshot;
        ``parlour fsck --repair`` answers them (``Maintenance.interrupted``)."""
        return self._maintenance.interrupted()

    # -- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Commit the writes queued so far, then close the environment and release the
        directory. Idempotent; every later call raises ``IllegalStateError``."""
        self._directory.close()

    def __enter__(self) -> LmdbStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
