"""LmdbStore's administration, as an object: ``Maintenance`` measures the store
(``statistics``), finds damaged records (``damaged``, ``undecodable``) and conversations
a killed process left with unanswered tool calls (``interrupted``), moves records aside
(``quarantine``, ``quarantined``) and copies the store (``backup``); it finds damaged
version records and moves them aside (``damaged_versions``,
``quarantine_damaged_versions``). None of it is part of
``PersistentStore``; ``parlour fsck`` and the admin commands use it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from parlour.runtime.blocks import ToolResultBlock, ToolUseBlock
from parlour.runtime.errors import CorruptSnapshotError
from parlour.runtime.snapshots import MessageSnapshot

from .._ids import conversation_key
from .._memory import DeleteListeners
from .._records import decode_header, message_prefix
from . import _layout, _reads, _salvage, _versions
from ._databases import Databases
from ._directory import Directory
from ._layout import QuarantinedRecord


class StoreStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """The store's size: the map, the pages in use, the conversations held."""

    map_size: int
    used_bytes: int
    conversations: int


class Maintenance:
    """The administrative operations on the conversations in ``directory``. A quarantine
    is a removal: ``listeners`` (the store's delete listeners) hear of it.

    Thread-safety: as the directory's: every method from any thread.
    """

    __slots__ = ("_dbs", "_directory", "_listeners")

    def __init__(self, directory: Directory, listeners: DeleteListeners) -> None:
        self._directory = directory
        self._dbs = directory.dbs
        self._listeners = listeners

    def statistics(self) -> StoreStatistics:
        """The map's size, the bytes of its pages in use, and how many conversations."""
        dbs = self._dbs
        conversations = self._directory.view(lambda txn: txn.stat(dbs.heads)["entries"])
        return StoreStatistics(
            map_size=self._directory.env.info()["map_size"],
            used_bytes=self._directory.book.used_bytes(),
            conversations=conversations,
        )

    def damaged(self) -> list[str]:
        """The ids of every conversation whose header does not decode."""
        return self._directory.view(lambda txn: _reads.damaged(txn, self._dbs))

    def quarantine(self, conversation_id: str) -> bool:
        """Move every record of a conversation, damaged or not, into the quarantine database
        as raw bytes, whoever owns it; the listeners hear of it. True when there was a
        record."""
        key = conversation_key(conversation_id)
        book = self._directory.book

        def write(txn: Any) -> bool:
            moved = _layout.quarantine(txn, self._dbs, key)
            _versions.drop(txn, self._dbs, key)
            book.note(conversation_id, None)
            return moved

        moved = bool(self._directory.submit(write, 0))
        if moved:
            self._listeners.notify(conversation_id)
        return moved

    def quarantined(self, conversation_id: str) -> list[QuarantinedRecord]:
        """Every quarantined record of the conversation, oldest first, exactly as stored."""
        prefix = message_prefix(conversation_key(conversation_id))
        return self._directory.view(lambda txn: _reads.quarantined(txn, self._dbs, prefix))

    def backup(self, destination: str | os.PathLike[str]) -> Path:
        """Copy the store, compacted, into ``destination`` (created if missing), consistent
        as of one moment while the store is in use.

        Raises:
            FileExistsError: ``destination`` already holds a store.
            NotADirectoryError: ``destination`` is a file.
            IllegalStateError: the store is closed.
        """
        source, target = self._directory.path, Path(destination)
        if target.exists() and not target.is_dir():
            raise NotADirectoryError(f"Cannot back up {source} into {target}: it is a file.")
        if (target / "data.mdb").exists():
            raise FileExistsError(f"Cannot back up {source} into {target}: it holds a store.")
        target.mkdir(parents=True, exist_ok=True)
        env = self._directory.env
        self._directory.view(lambda txn: env.copy(str(target), compact=True))
        return target

    def undecodable(self) -> list[tuple[str, str]]:
        """Every conversation whose current record does not decode, with the reason, in id
        order, read in one snapshot."""
        return self._directory.view(lambda txn: _undecodable(txn, self._dbs))

    def damaged_versions(self) -> list[tuple[str, int, str]]:
        """Every recorded version that does not read, as (id, version, why), in id and
        version order, read in one snapshot. A conversation whose header does not decode is
        ``undecodable``'s, not looked into here."""
        return self._directory.view(lambda txn: _damaged_versions(txn, self._dbs))

    def quarantine_damaged_versions(self, conversation_id: str) -> list[int]:
        """Move every run of the conversation's version records that does not read into
        quarantine, raw (``quarantined`` gives them back); a run that reached the newest
        record leaves the current version recorded anew as a checkpoint. The current record
        is not touched. Returns the versions moved."""
        key = conversation_key(conversation_id)
        dbs = self._dbs

        def write(txn: Any) -> list[int]:
            raw = txn.get(key, db=dbs.heads)
            if raw is None:
                return []
            head = decode_header(conversation_id, raw)
            current = (head.version, head.updated_at)
            moved: list[int] = []
            for version, _ in _salvage.unreadable(txn, dbs, key, conversation_id, head.user_id):
                if version not in moved:  # not in a run already moved
                    moved += _salvage.salvage(txn, dbs, key, version, current, whole_chain=False)
            return moved

        return list(self._directory.submit(write, 0))

    def interrupted(self) -> list[tuple[str, str, int]]:
        """Every conversation whose current record holds a tool call that no later result
        answers (what a process killed while a tool ran leaves), as (id, owner, how many
        such calls), in id order, read in one snapshot. A record that does not decode is
        ``undecodable``'s, not listed here."""
        return self._directory.view(lambda txn: _interrupted(txn, self._dbs))


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


def _damaged_versions(txn: Any, dbs: Databases) -> list[tuple[str, int, str]]:
    found = []
    for item, raw in txn.cursor(db=dbs.heads):
        key = bytes(item)
        cid = key.decode(errors="replace")
        try:
            owner = decode_header(cid, raw).user_id
        except CorruptSnapshotError:
            continue
        found += [(cid, v, why) for v, why in _salvage.unreadable(txn, dbs, key, cid, owner)]
    return found


def _interrupted(txn: Any, dbs: Databases) -> list[tuple[str, str, int]]:
    found = []
    for item, raw in txn.cursor(db=dbs.heads):
        key = bytes(item)
        cid = key.decode(errors="replace")
        try:
            snapshot = _reads.record_of(txn, dbs, key, cid, decode_header(cid, raw))
        except CorruptSnapshotError:
            continue
        parked = snapshot.turn.parked() if snapshot.turn is not None else frozenset[str]()
        calls = unanswered_calls(snapshot.messages) - len(parked)  # approvals wait, unanswered
        if calls > 0:
            found.append((cid, snapshot.user_id or "", calls))
    return found


def unanswered_calls(messages: list[MessageSnapshot]) -> int:
    """How many tool calls of ``messages`` no later result answers: a result answers an
    open call of its id before it (the count a restore's repair answers)."""
    open_: dict[str, int] = {}
    for message in messages:
        for block in message.blocks:
            if type(block) is ToolUseBlock:
                open_[block.id] = open_.get(block.id, 0) + 1
            elif type(block) is ToolResultBlock and open_.get(block.tool_use_id):
                open_[block.tool_use_id] -= 1
    return sum(open_.values())
