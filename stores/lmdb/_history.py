"""LmdbStore's version history as an object: ``History`` records each save as a version (in
the save's own write), lists and reads the kept ones, and applies the retention policy. The
version records themselves (their format, the chain rule, replay, pruning one conversation)
are ``_versions``'s functions."""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

from loguru import logger

from parlour.runtime.errors import CorruptSnapshotError, IllegalStateError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot

from .._checked import Run
from .._ids import conversation_key, user_key
from .._protocols import ConversationVersion
from .._records import Chain, Header, decode_header, decode_record
from . import _layout, _pruning, _reads, _salvage, _versions
from ._databases import Databases
from ._directory import Directory


class History:
    """The version history of the conversations in ``directory``, kept under ``retention``
    (None: history is off, and nothing is recorded).

    It reads and writes through the directory (``view``, ``submit``) and checks ownership
    as every read does (``_reads.owned_head``); ``record`` runs inside a save's write.

    Thread-safety: as the directory's: every method from any thread; ``record`` under the
    commit lock, inside the save's transaction.
    """

    __slots__ = ("_dbs", "_directory", "retention")

    def __init__(self, directory: Directory, retention: _versions.Retention | None) -> None:
        self._directory = directory
        self._dbs = directory.dbs
        self.retention = retention

    def record(
        self,
        txn: Any,
        key: bytes,
        old: Header | None,
        head: Header,
        body: bytes | None,
        writes: Run,
        usage: Run,
    ) -> Chain | None:
        """Record a save as a version (in the save's own transaction; ``body`` None: the
        previous version left this body too; ``writes`` and ``usage``: the message and
        ledger records it wrote, ``head`` their counts); every ``PRUNE_EVERY``-th version
        of a conversation also prunes it. Returns the chain for the save's header (None:
        history is off)."""
        retention = self.retention
        if retention is None:
            return None
        previous = None if old is None else old.history
        checkpoint = head.version % _versions.PRUNE_EVERY == retention.whole_at
        chain = _versions.record(
            txn,
            self._dbs,
            key,
            head.version,
            head.updated_at,
            body,
            head.message_count,
            writes,
            head.usage_count,
            usage,
            previous,
            checkpoint,
            0 if old is None else old.message_count,
            0 if old is None else old.usage_count,
        )
        if head.version % _versions.PRUNE_EVERY == 0:
            _, reseeded = self._prune(key, retention, txn, (head.version, head.updated_at))
            if reseeded:  # the chain this save extended was damaged: it starts anew
                return None
        return chain

    def pin(self, txn: Any, key: bytes) -> bool:
        """Before a save overwrites or removes any of ``key``'s stored records: the versions
        that refer to them get their bytes (``_versions.pin``). Also with history off: a
        store opened with it before keeps those versions, for when it is opened with it again.
        One that cannot get them (damage) is moved into quarantine, raw: kept, it would read
        as what the save writes. True when one was: the save's version then starts a new
        chain."""
        broken = _versions.pin(txn, self._dbs, key)
        if broken:
            _layout.quarantine_versions(txn, self._dbs, key, broken)
            logger.error(
                "Versions {} of stored conversation {} refer to damaged records; they were "
                "moved into quarantine.",
                [number for number, _ in broken],
                key.decode(errors="replace"),
            )
        return bool(broken)

    def versions(self, conversation_id: str, user_id: str) -> list[ConversationVersion]:
        """The kept versions of the conversation, most recent first; empty when there is no
        such conversation.

        Raises:
            ValueError: an invalid id.
            PermissionError: the record belongs to another user.
            CorruptSnapshotError: the record's header does not decode.
            NotImplementedError: the store was opened with ``history=False``.
        """
        self._kept()
        key = conversation_key(conversation_id)
        user_key(user_id)
        dbs = self._dbs

        def read(txn: Any) -> list[ConversationVersion]:
            if _reads.owned_head(txn, dbs, key, conversation_id, user_id) is None:
                return []
            return [
                ConversationVersion(version=k.version, saved_at=k.saved_at)
                for k in reversed(_versions.kept(txn, dbs, key))
            ]

        return self._directory.view(read)

    def load_version(
        self, conversation_id: str, version: int | dt.datetime, user_id: str
    ) -> ConversationPersistenceSnapshot | None:
        """The conversation exactly as it was at ``version`` (a number, or a time: the
        version current then), stamped with that version; None when the conversation or
        that version is not kept.

        Raises:
            ValueError: an invalid id.
            PermissionError: the record belongs to another user.
            CorruptSnapshotError: the version's records do not decode.
            NotImplementedError: the store was opened with ``history=False``.
        """
        self._kept()
        key = conversation_key(conversation_id)
        user_key(user_id)
        dbs = self._dbs

        def read(txn: Any) -> ConversationPersistenceSnapshot | None:
            head = _reads.owned_head(txn, dbs, key, conversation_id, user_id)
            if head is None:
                return None
            wanted = version
            if isinstance(wanted, dt.datetime):
                wanted = _versions.as_of(txn, dbs, key, wanted) or 0
            return _as_of(conversation_id, head, wanted, _held(txn, dbs, key, wanted))

        return self._directory.view(read)

    def _kept(self) -> None:
        """Refuse a history read when none is kept: an empty answer would say a saved
        conversation has no versions."""
        if self.retention is None:
            raise NotImplementedError(
                f"LmdbStore at {self._directory.path} was opened with history=False: it "
                "keeps no version history (open it with history=True to keep versions)."
            )

    def prune(self, conversation_id: str | None = None) -> int:
        """Apply the retention policy to one conversation, or to all (one write per
        conversation, so saves go on between them).

        Returns:
            How many versions were removed.

        Raises:
            IllegalStateError: the directory is read-only or closed, or history is off.
        """
        retention = self.retention
        if retention is None:
            raise IllegalStateError(
                f"LmdbStore at {self._directory.path} keeps no version history."
            )
        keys = (
            [conversation_key(conversation_id)]
            if conversation_id is not None
            else self._directory.view(lambda txn: _conversation_keys(txn, self._dbs))
        )
        removed, submit = 0, self._directory.submit
        for key in keys:  # a conversation that fails is logged and passed: the rest go on
            try:
                removed += submit(functools.partial(self._pruned, key, retention), 0)
            except CorruptSnapshotError as exc:
                logger.error("prune passed conversation {}: {}", key.decode(errors="replace"), exc)
        return removed

    def _pruned(self, key: bytes, retention: _versions.Retention, txn: Any) -> int:
        """``prune``'s write for one conversation: its stored version from its header."""
        raw = txn.get(key, db=self._dbs.heads)
        current = None
        if raw is not None:
            head = decode_header(key.decode(errors="replace"), raw)
            current = (head.version, head.updated_at)
        return self._prune(key, retention, txn, current)[0]

    def _prune(
        self,
        key: bytes,
        retention: _versions.Retention,
        txn: Any,
        current: tuple[int, dt.datetime] | None,
    ) -> tuple[int, bool]:
        """Prune ``key``; a version the prune cannot rebuild (damage) is reported, and the
        run of records it depends on moved into quarantine before the prune goes on.
        Returns how many versions left ``versions`` and whether the newest went with them
        (the current version was then recorded anew as a checkpoint)."""
        cid, moved = key.decode(errors="replace"), list[int]()
        while True:
            try:
                removed = _pruning.prune(txn, self._dbs, key, retention)
            except _pruning.Unbuildable as exc:  # raised before the prune removed anything
                error = _salvage.damaged_version(cid, exc.version, exc.__cause__ or exc)
                run = _salvage.salvage(txn, self._dbs, key, exc.version, current, whole_chain=True)
                logger.error("{} Versions {} were moved into quarantine.", error, run)
                if not run:  # cannot happen (the prune listed it); never loop
                    raise error from exc
                moved += run
                continue
            reseeded = current is not None and current[0] in moved
            return removed + len(moved) - reseeded, reseeded


def _held(txn: Any, dbs: Databases, key: bytes, version: int) -> _versions.State | None:
    try:
        return _versions.state(txn, dbs, key, version)
    except _salvage.DAMAGE as exc:  # a broken chain or record: damage
        raise _salvage.damaged_version(key.decode(errors="replace"), version, exc) from exc


def _as_of(
    cid: str, head: Header, version: int, held: _versions.State | None
) -> ConversationPersistenceSnapshot | None:
    if held is None:
        return None
    body, messages, usage = held
    ledger = None if usage is None else (len(usage), usage)
    snapshot = decode_record(cid, head.user_id, len(messages), body, messages, ledger)
    snapshot.stored_version = version
    if version == head.version:  # the header keeps the current version's open-turn record
        snapshot.turn = head.turn
    return snapshot


def _conversation_keys(txn: Any, dbs: Databases) -> list[bytes]:
    return [bytes(k) for k in txn.cursor(db=dbs.heads).iternext(values=False)]
