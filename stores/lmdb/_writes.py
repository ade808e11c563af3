"""What LmdbStore's writes do: ``Writes`` makes, for a create, an update and a delete, the
write the group commit applies in its transaction, planned outside it against what the store
last wrote (``Bookkeeping``), so a save writes only the records that changed.

A write checks the owner and the fencing version against the header the store last wrote
(remembered: the directory's only writer knows what is there), else the one it reads; then
it moves the owner-index entry, writes the body when it changed, the changed messages and
ledger entries, the version record (``History.record``) and the header, last. An append
(``append``) plans nothing: the conversation proved it only added, so it writes the new
records, the version record of those and the header, and checks that the version it follows
ends where it starts.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import msgspec

from parlour.runtime.errors import (
    ConversationNotFoundError,
    CorruptSnapshotError,
    StaleVersionError,
)
from parlour.runtime.snapshots import Appended, ConversationPersistenceSnapshot

from .._body import Body, body_after
from .._checked import Run, encode_messages, encode_usage
from .._ids import check_owner, conversation_key, require_id, user_key
from .._packed import packed_body, unpacked_body
from .._records import (
    Header,
    MessagePlan,
    UsagePlan,
    advanced,
    header_encoder,
    message_key,
    plan_messages,
    plan_usage,
    replanned,
    write_run,
)
from . import _layout, _reads, _versions
from ._bookkeeping import Bookkeeping
from ._databases import Databases
from ._group_commit import Write
from ._history import History


class Writes:
    """The writes of one store: each method validates its ids (raising at once, before
    anything is queued) and returns the write with its size in bytes, for the directory's
    ``submit`` or ``defer``; the write raises the refusals that need the transaction.

    Thread-safety: the methods from any thread; the writes run under the commit lock.
    """

    __slots__ = ("_book", "_dbs", "_history", "_now")

    def __init__(
        self,
        dbs: Databases,
        book: Bookkeeping,
        history: History,
        now: Callable[[], dt.datetime],
    ) -> None:
        self._dbs = dbs
        self._book = book
        self._history = history
        self._now = now

    def create(self, snapshot: ConversationPersistenceSnapshot, user_id: str) -> tuple[Write, int]:
        """A create's write (an existing record of the user's is saved over) and size."""
        key = require_id(snapshot, user_id)
        cid, body = str(snapshot.conversation_id), body_after(snapshot, None)
        plan = plan_messages(None, snapshot.messages, cid)  # a create writes every message
        usage = plan_usage(None, snapshot.usage, cid)

        def write(txn: Any) -> int:
            now = self._book.moment(self._now)
            old = self._written_head(txn, key, cid, user_id)
            if old is None:
                version = _layout.last_version(txn, self._dbs, key) + 1
                txn.delete(key, db=self._dbs.tombstones)
                head = Header(
                    user_id=user_id,
                    title=snapshot.title,
                    created_at=now,
                    updated_at=now,
                    message_count=len(plan.items),
                    version=version,
                    usage_count=len(usage.items),
                    turn=snapshot.turn,
                )
            else:
                head = advanced(old, now, len(plan.items), len(usage.items), snapshot.turn)
            self._put(txn, key, cid, old, head, body, plan, usage)
            return head.version

        return write, body.size + plan.size + usage.size

    def update(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, queued: bool = False
    ) -> tuple[Write, int]:
        """An update's write and size; the next save plans against a ``queued`` (deferred) one."""
        key = require_id(snapshot, user_id)
        cid = str(snapshot.conversation_id)
        last = self._book.planning_base(cid)  # its body, when this one is the same: no encoding
        body = body_after(snapshot, None if last is None else last[1])
        plan = plan_messages(None if last is None else last[0], snapshot.messages, cid)
        usage = plan_usage(None if last is None else last[2], snapshot.usage, cid)
        planned = (plan.items, body, usage.items, None)
        if queued:
            self._book.queue(cid, planned)

        def write(txn: Any) -> int:
            if queued:
                self._book.dequeue(cid, planned)
            old = self._updated_head(txn, key, cid, user_id, snapshot.stored_version)
            moment = self._book.moment(self._now)
            head = advanced(old, moment, len(plan.items), len(usage.items), snapshot.turn)
            self._put(txn, key, cid, old, head, body, plan, usage)
            return head.version

        return write, body.size + plan.size + usage.size

    def append(self, appended: Appended, user_id: str) -> tuple[Write, int]:
        """An append's write (``PersistentStore.append_context``) and size: the new
        messages and ledger entries, the version record of what it wrote, the owner-index
        entry and the header; no plan, no body (it is the version's before)."""
        cid = appended.conversation_id
        key = conversation_key(cid)
        user_key(user_id)
        start, usage_start = appended.start, appended.usage_start
        writes = encode_messages(cid, appended.messages, 0, len(appended.messages), start)
        usage = encode_usage(cid, appended.usage, 0, len(appended.usage), usage_start)

        def write(txn: Any) -> int:
            old = self._updated_head(txn, key, cid, user_id, appended.version)
            if old.message_count != start or old.usage_count != usage_start:
                raise ValueError(
                    f"An append to conversation {cid} at message {start} and ledger entry "
                    f"{usage_start} does not follow its version {old.version} "
                    f"({old.message_count} messages, {old.usage_count} ledger entries); "
                    "nothing was written."
                )
            moment = self._book.moment(self._now)
            count, entries = start + len(writes), usage_start + len(usage)
            head = advanced(old, moment, count, entries, appended.turn)
            dbs = self._dbs
            _layout.reindex(txn, dbs, old, head, key)
            for index, data in writes:
                txn.put(message_key(key, index), data, db=dbs.messages)
            for index, data in usage:
                txn.put(message_key(key, index), data, db=dbs.usage)
            head = self._recorded(txn, key, old, head, None, writes, usage)
            self._book.appended(cid, appended, head)
            return head.version

        size = sum(len(data) for _, data in writes) + sum(len(data) for _, data in usage)
        return write, size

    def delete(self, conversation_id: str, user_id: str) -> Write:
        """A delete's write: True when it removed the record (another user's raises)."""
        key = conversation_key(conversation_id)
        user_key(user_id)

        def write(txn: Any) -> bool:
            head = _reads.owned_head(txn, self._dbs, key, conversation_id, user_id)
            if head is None:
                return False
            _layout.remove(txn, self._dbs, key, head)
            self._book.note(conversation_id, None)
            return True

        return write

    def _put(
        self,
        txn: Any,
        key: bytes,
        cid: str,
        old: Header | None,
        head: Header,
        body: Body,
        plan: MessagePlan,
        usage: UsagePlan,
    ) -> None:
        """Write a conversation inside its save's write: owner index, body (when it
        changed), the changed messages and ledger entries, the removal of those past the
        new ends, the version record, and the header (last: it holds the history's chain)."""
        known = None if old is None else self._book.known(cid)  # a new record: everything
        base, ledger = (None, None) if known is None else (known[0], known[2])
        if plan.base is not base or usage.base is not ledger:  # another write landed since
            plan, usage = replanned(cid, base, ledger, plan, usage)
        _layout.reindex(txn, self._dbs, old, head, key)
        was = None if known is None else known[1]
        same = was is not None and (body is was or body.data == self._body_of(txn, key, was))
        # the versions that refer to what it overwrites get the bytes; past damage, the
        # save's own version starts a chain of its own (a checkpoint)
        if (
            old is not None
            and not (same and _added(plan, usage, old))
            and not (known is None and self._alike(txn, key, old, body, plan, usage))
            and self._history.pin(txn, key)
        ):
            old = msgspec.structs.replace(old, history=None)
        written = None  # the usual turn leaves the body as it was (its version records none)
        if not same:  # the record and the version hold it packed alike (``_packed``)
            assert body.data is not None  # only a remembered body lacks them: ``was`` itself
            written = packed_body(body.data)
            txn.put(key, written, db=self._dbs.bodies)
        write_run(txn, self._dbs.messages, key, plan, 0 if old is None else old.message_count)
        if usage.writes or (old is not None and len(usage.items) < old.usage_count):
            write_run(txn, self._dbs.usage, key, usage, 0 if old is None else old.usage_count)
        head = self._recorded(txn, key, old, head, written, plan.writes, usage.writes)
        self._book.note(cid, (plan.items, body, usage.items, head))  # void if the batch aborts

    def _alike(
        self, txn: Any, key: bytes, old: Header, body: Body, plan: MessagePlan, usage: UsagePlan
    ) -> bool:
        """True when a save of a conversation the store does not remember (the first after
        a restart, or once forgotten: it writes every record) writes over each stored
        record the bytes it holds, and cuts none: nothing a version refers to changes."""
        if len(plan.items) < old.message_count or len(usage.items) < old.usage_count:
            return False
        if body.data is None or body.data != self._body_of(txn, key, None):
            return False
        for db, writes, count in (
            (self._dbs.messages, plan.writes, old.message_count),
            (self._dbs.usage, usage.writes, old.usage_count),
        ):
            for index, data in writes:
                if index < count and txn.get(message_key(key, index), db=db) != data:
                    return False
        return True

    def _body_of(self, txn: Any, key: bytes, was: Body | None) -> bytes | None:
        """The bytes of the body the store last wrote (``was``; None: not remembered):
        remembered, or read from its record (a remembered body keeps no bytes); None when
        the record is gone or damaged (the save writes its own)."""
        if was is not None and was.data is not None:
            return was.data
        stored = txn.get(key, db=self._dbs.bodies)
        try:
            return None if stored is None else bytes(unpacked_body(stored, key.decode()))
        except CorruptSnapshotError:
            return None

    def _recorded(
        self,
        txn: Any,
        key: bytes,
        old: Header | None,
        head: Header,
        body: bytes | None,
        writes: Run,
        usage: Run,
    ) -> Header:
        """The save's version record (``History.record``: ``body`` None when it left the
        body as it was), then its header, last: it carries the history's chain. Returns the
        header written."""
        chain = self._history.record(txn, key, old, head, body, writes, usage)
        head = head if chain == head.history else msgspec.structs.replace(head, history=chain)
        txn.put(key, header_encoder.encode(head), db=self._dbs.heads)
        return head

    def _updated_head(self, txn: Any, key: bytes, cid: str, user_id: str, version: int) -> Header:
        """The owned header an update from ``version`` replaces.

        Raises:
            ConversationNotFoundError: there is none (deleted).
            StaleVersionError: the record has moved past ``version``.
        """
        old = self._written_head(txn, key, cid, user_id)
        if old is None:
            raise ConversationNotFoundError(
                f"Conversation {cid} has no stored record; it may have been deleted. "
                "The save was refused rather than resurrect it."
            )
        if version != old.version:
            raise StaleVersionError(cid, version, old.version)
        return old

    def _written_head(self, txn: Any, key: bytes, cid: str, user_id: str) -> Header | None:
        """The owned header in a save: the one this store last wrote, remembered (the
        directory's only writer: what it wrote is what is there), else read."""
        known = self._book.known(cid)
        if known is None or known[3] is None:
            return _reads.owned_head(txn, self._dbs, key, cid, user_id)
        check_owner(known[3].user_id, cid, user_id)
        return known[3]


def _added(plan: MessagePlan, usage: UsagePlan, old: Header) -> bool:
    """True when the plans only add records past those ``old`` counts
    (``_versions.only_adds``): none of those is overwritten or removed."""
    return _versions.only_adds(
        len(plan.items),
        plan.writes,
        old.message_count,
        len(usage.items),
        usage.writes,
        old.usage_count,
    )
