"""LmdbStore's version history, retention, backup, quarantine and the decode check: the
methods beside the record surface, on the same environment (a mixin: ``LmdbStore`` supplies
the environment, the databases and its read and write paths)."""

from __future__ import annotations

import datetime as dt
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from parlour.runtime.errors import CorruptSnapshotError, IllegalStateError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot

from .._ids import conversation_key, user_key
from .._protocols import ConversationVersion
from .._records import (
    Chain,
    Header,
    MessagePlan,
    UsagePlan,
    decode_header,
    decode_record,
    message_prefix,
)
from . import _layout, _reads, _versions
from ._bookkeeping import Bookkeeping
from ._group_commit import Write
from ._layout import Databases, QuarantinedRecord
from ._lock import ReadGate

T = TypeVar("T")


class StoreStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """The store's size: the map, the pages in use, the conversations held."""

    map_size: int
    used_bytes: int
    conversations: int


class LmdbHistory:
    """Version history, ``prune``, ``backup`` and the administration (``statistics``,
    ``damaged``, ``quarantine``, ``quarantined``, ``undecodable``) for ``LmdbStore``."""

    path: Path
    _env: Any
    _dbs: Databases
    _gate: ReadGate
    _retention: _versions.Retention | None
    _book: Bookkeeping

    def _view(self, read: Callable[[Any], T]) -> T:
        raise NotImplementedError

    def _submit(self, write: Write, size: int) -> Any:
        raise NotImplementedError

    def _head(self, txn: Any, key: bytes, cid: str, user_id: str) -> Header | None:
        raise NotImplementedError

    def _removed(self, conversation_id: str, removed: bool) -> bool:
        raise NotImplementedError

    def statistics(self) -> StoreStatistics:
        conversations = self._view(lambda txn: txn.stat(self._dbs.heads)["entries"])
        info = self._env.info()
        return StoreStatistics(
            map_size=info["map_size"],
            used_bytes=self._book.used_bytes(),
            conversations=conversations,
        )

    def damaged(self) -> list[str]:
        """The ids of every conversation whose header does not decode: records no user call
        can load or remove (their owner cannot be read). ``quarantine`` moves them away."""

        return self._view(lambda txn: _reads.damaged(txn, self._dbs))

    def quarantine(self, conversation_id: str) -> bool:
        """Move every record of a conversation, damaged or not, into the quarantine database
        as raw bytes (see ``quarantined``), whoever owns it. An administrative operation:
        it is no part of ``PersistentStore``. Delete listeners hear of it; the id's next
        version is past any it had. True when there was a record."""
        key = conversation_key(conversation_id)

        def write(txn: Any) -> bool:
            moved = _layout.quarantine(txn, self._dbs, key)
            _versions.drop(txn, self._dbs, key)
            self._book.note(conversation_id, None)
            return moved

        return self._removed(conversation_id, bool(self._submit(write, 0)))

    def quarantined(self, conversation_id: str) -> list[QuarantinedRecord]:
        """Every quarantined record of the conversation, oldest first, exactly as stored."""
        prefix = message_prefix(conversation_key(conversation_id))

        return self._view(lambda txn: _reads.quarantined(txn, self._dbs, prefix))

    def _record(
        self,
        txn: Any,
        key: bytes,
        old: Header | None,
        head: Header,
        body: bytes,
        same_body: bool,
        plan: MessagePlan,
        usage: UsagePlan,
    ) -> Chain | None:
        """Record a save as a version (in the save's own transaction; ``same_body``: the
        previous version left this body too); every ``PRUNE_EVERY``-th version of a
        conversation also prunes it. Returns the chain for the save's header (None:
        history is off)."""
        if self._retention is None:
            return None
        previous = None if old is None else old.history
        checkpoint = head.version % _versions.PRUNE_EVERY == self._retention.whole_at
        chain = _versions.record(
            txn,
            self._dbs,
            key,
            head.version,
            head.updated_at,
            body,
            plan,
            usage,
            previous,
            checkpoint,
            same_body,
        )
        if head.version % _versions.PRUNE_EVERY == 0:
            _versions.prune(txn, self._dbs, key, self._retention)
        return chain

    def get_version_history(self, conversation_id: str, user_id: str) -> list[ConversationVersion]:
        """The kept versions of the conversation, most recent first; empty when there is no
        such conversation.

        Raises:
            ValueError: an invalid id.
            PermissionError: the record belongs to another user.
            CorruptSnapshotError: the record's header does not decode.
        """
        key = conversation_key(conversation_id)
        user_key(user_id)

        def read(txn: Any) -> list[ConversationVersion]:
            if self._head(txn, key, conversation_id, user_id) is None:
                return []
            return [
                ConversationVersion(version=k.version, saved_at=k.saved_at)
                for k in reversed(_versions.kept(txn, self._dbs, key))
            ]

        return self._view(read)

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
        key = conversation_key(conversation_id)
        user_key(user_id)

        def read(txn: Any) -> ConversationPersistenceSnapshot | None:
            head = self._head(txn, key, conversation_id, user_id)
            if head is None:
                return None
            wanted = version
            if isinstance(wanted, dt.datetime):
                wanted = _versions.as_of(txn, self._dbs, key, wanted) or 0
            return _as_of(conversation_id, head, wanted, self._held(txn, key, wanted))

        return self._view(read)

    def _held(self, txn: Any, key: bytes, version: int) -> _versions.State | None:
        try:
            return _versions.state(txn, self._dbs, key, version)
        except (KeyError, ValueError, IndexError) as exc:  # a broken chain or record: damage
            raise CorruptSnapshotError(
                f"The history of stored conversation {key.decode(errors='replace')} is "
                f"damaged: {exc}"
            ) from exc

    def prune(self, conversation_id: str | None = None) -> int:
        """Apply the retention policy to one conversation, or to all (one write per
        conversation, so saves go on between them). Safe while the store is in use: the
        oldest kept version becomes a checkpoint before older ones go.

        Returns:
            How many versions were removed.

        Raises:
            IllegalStateError: the store is read-only or closed, or keeps no history.
        """
        retention = self._retention
        if retention is None:
            raise IllegalStateError(f"LmdbStore at {self.path} keeps no version history.")
        keys = (
            [conversation_key(conversation_id)]
            if conversation_id is not None
            else self._view(lambda txn: _conversation_keys(txn, self._dbs))
        )
        return sum(
            int(self._submit(functools.partial(self._prune, key, retention), 0)) for key in keys
        )

    def _prune(self, key: bytes, retention: _versions.Retention, txn: Any) -> int:
        return _versions.prune(txn, self._dbs, key, retention)

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
        target = Path(destination)
        if target.exists() and not target.is_dir():
            raise NotADirectoryError(f"Cannot back up {self.path} into {target}: it is a file.")
        if (target / "data.mdb").exists():
            raise FileExistsError(f"Cannot back up {self.path} into {target}: it holds a store.")
        target.mkdir(parents=True, exist_ok=True)
        self._view(lambda txn: self._env.copy(str(target), compact=True))
        return target

    def undecodable(self) -> list[tuple[str, str]]:
        """Every conversation whose current record does not decode, with the reason, in id
        order: (id, reason). Reads every record in one snapshot (an administrative scan:
        ``quarantine`` moves what it finds).

        Raises:
            IllegalStateError: the store is closed.
        """
        return self._view(lambda txn: _undecodable(txn, self._dbs))


def _undecodable(txn: Any, dbs: Databases) -> list[tuple[str, str]]:
    found = []
    for item, raw in txn.cursor(db=dbs.heads):
        key = bytes(item)
        cid = key.decode(errors="replace")
        try:
            _reads.record_of(txn, dbs, key, cid, decode_header(cid, raw))
        except CorruptSnapshotError as exc:
            found.append((cid, str(exc)))
    return found


def _as_of(
    cid: str, head: Header, version: int, held: _versions.State | None
) -> ConversationPersistenceSnapshot | None:
    if held is None:
        return None
    body, messages, usage = held
    ledger = None if usage is None else (len(usage), usage)
    snapshot = decode_record(cid, head.user_id, len(messages), body, messages, ledger)
    snapshot.stored_version = version
    return snapshot


def _conversation_keys(txn: Any, dbs: Databases) -> list[bytes]:
    return [bytes(k) for k in txn.cursor(db=dbs.heads).iternext(values=False)]
