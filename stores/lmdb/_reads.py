"""What LmdbStore's read transactions do: the one ownership check, a conversation's
messages and ledger entries by one cursor range each, a user's listing from the owner
index, the damaged scan."""

from __future__ import annotations

import itertools
from typing import Any

from loguru import logger

from parlour.runtime.errors import CorruptSnapshotError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot

from .._ids import ORDER_PREFIX_BYTES, check_owner, order_bytes
from .._protocols import ConversationSummary
from .._records import (
    Header,
    decode_header,
    decode_record,
    message_key,
    message_prefix,
)
from ._databases import Databases
from ._layout import QuarantinedRecord, quarantine_decoder


def owned_head(txn: Any, dbs: Databases, key: bytes, cid: str, user_id: str) -> Header | None:
    """The one ownership check of every call: the record's header, None when there is none.

    Raises:
        PermissionError: another user owns the record.
        CorruptSnapshotError: the header does not decode.
    """
    raw = txn.get(key, db=dbs.heads)
    if raw is None:
        return None
    head = decode_header(cid, raw)
    check_owner(head.user_id, cid, user_id)
    return head


def run_of(txn: Any, db: Any, key: bytes, count: int) -> list[memoryview]:
    """Up to ``count`` message (or ledger) records of ``key`` in ``db``, in order (fewer
    when some are missing).

    The usual record reads as one run from record 0: when the ``count``-th record of the
    run is record ``count - 1``, the run holds exactly records 0 to ``count - 1`` (keys
    are unique and sorted), so no key before it needs checking."""
    cursor = txn.cursor(db=db)
    if count and cursor.set_key(message_key(key, 0)):
        found = list(itertools.islice(cursor.iternext(keys=False), count))
        if len(found) == count and cursor.key() == message_key(key, count - 1):
            return found
    return _scanned(cursor, key, count)


def _scanned(cursor: Any, key: bytes, count: int) -> list[memoryview]:
    """The records of ``key`` that are there among indexes 0 to ``count - 1``: a stray
    record past the end, or under a longer key, is no stand-in for a missing one."""
    prefix, end = message_prefix(key), message_key(key, count)
    size = len(end)
    found: list[memoryview] = []
    if not cursor.set_range(prefix):
        return found
    for item_key, value in cursor:
        item = bytes(item_key)
        if len(found) == count or item >= end or not item.startswith(prefix):
            break
        if len(item) == size:
            found.append(value)
    return found


def record_of(
    txn: Any, dbs: Databases, key: bytes, cid: str, head: Header
) -> ConversationPersistenceSnapshot:
    """The current record of ``cid`` reassembled (body, messages, ledger), stamped with its
    version: the one read behind ``load`` and the ``undecodable`` scan.

    Raises:
        CorruptSnapshotError: the body is missing or any record does not decode.
    """
    body = txn.get(key, db=dbs.bodies)
    if body is None:  # a head without a body: only a damaged file can do this
        raise CorruptSnapshotError(f"Stored conversation {cid} has no body.")
    messages = run_of(txn, dbs.messages, key, head.message_count)
    count = head.usage_count
    usage = run_of(txn, dbs.usage, key, count) if count else []
    snapshot = decode_record(cid, head.user_id, head.message_count, body, messages, (count, usage))
    snapshot.stored_version = head.version
    snapshot.turn = head.turn
    return snapshot


def listing(
    txn: Any, dbs: Databases, owner: bytes, user_id: str, limit: int | None, start: bytes | None
) -> list[ConversationSummary]:
    """The user's summaries from their owner index (sorted duplicates under their id), from
    after ``start`` (an index entry) when given. Reads no other user's records."""
    cursor = txn.cursor(db=dbs.owners)
    if start is None:
        positioned = cursor.set_key(owner)
    else:
        positioned = cursor.set_range_dup(owner, start)
        if positioned and bytes(cursor.value()) == start:
            positioned = cursor.next_dup()
    found: list[ConversationSummary] = []
    while positioned and (limit is None or len(found) < limit):
        summary = _summary(txn, dbs, bytes(cursor.value()), user_id)
        if summary is not None:
            found.append(summary)
        positioned = cursor.next_dup()
    return found


def _summary(txn: Any, dbs: Databases, entry: bytes, user_id: str) -> ConversationSummary | None:
    """The summary an owner-index entry points at; None (logged) when its header is damaged
    or does not name this user at this place in the order."""
    key = entry[ORDER_PREFIX_BYTES:]
    cid = key.decode(errors="replace")
    raw = txn.get(key, db=dbs.heads)
    try:
        head = None if raw is None else decode_header(cid, raw)
    except CorruptSnapshotError as exc:
        logger.warning("listing {}: {}", user_id, exc)
        return None
    if head is None or head.user_id != user_id or order_bytes(head.updated_at, key) != entry:
        logger.warning("listing {}: a stale owner-index entry for {}", user_id, cid)
        return None
    return ConversationSummary(
        conversation_id=cid,
        title=head.title,
        created_at=head.created_at,
        updated_at=head.updated_at,
    )


def damaged(txn: Any, dbs: Databases) -> list[str]:
    """The ids of every record whose header does not decode."""
    found = []
    for key, raw in txn.cursor(db=dbs.heads):
        cid = bytes(key).decode(errors="replace")
        try:
            decode_header(cid, raw)
        except CorruptSnapshotError:
            found.append(cid)
    return found


def quarantined(txn: Any, dbs: Databases, prefix: bytes) -> list[QuarantinedRecord]:
    """Every quarantined record under ``prefix`` (an id and a NUL), oldest first."""
    cursor = txn.cursor(db=dbs.quarantine)
    if not cursor.set_range(prefix):
        return []
    records = []
    for key, value in cursor:
        if not bytes(key).startswith(prefix):
            break
        records.append(quarantine_decoder.decode(value))
    return records
