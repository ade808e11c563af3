"""LmdbStore's databases, its layout version and the upgrade from older layouts, the owner
index, tombstones and quarantine: everything a transaction does besides one record.

Layouts: 1 (no meta database, headers without a version or with versions that restart
after a delete, no owner index, no tombstones), 2 (no version history), 3 (the usage
ledger inside the body), 4 (the ledger one record per entry), 5 (a version record that
left the body as it was holds an empty body; layout 4's records read alike, and a parlour
knowing only 4 refuses the directory instead of misreading them) and 6 (a body
of 1 KiB or more, in its record and in a version record, is stored compressed where that
saves an eighth, ``_packed.packed_body``; layout 5's plain bodies read as they are, and
a parlour knowing only 5 refuses the directory instead of misreading a packed one) and 7
(this code: a version record may refer to the conversation's stored records instead of
holding their bytes, ``_versions``; layout 6's records read as they are, and a parlour
knowing only 6 refuses the directory instead of misreading one that refers).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import lmdb
import msgspec
from loguru import logger

from parlour.runtime.errors import CorruptSnapshotError, IllegalStateError
from parlour.runtime.snapshots import decode_snapshot

from .._ids import order_bytes
from .._records import (
    Header,
    encode_body,
    header_decoder,
    header_encoder,
    legacy_header_decoder,
    message_key,
    message_prefix,
    usage_encoder,
)
from . import _versions
from ._databases import NAMES, Databases

LAYOUT = 7
_LAYOUT_KEY = b"layout"


class QuarantinedRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The raw bytes of a record moved out of the way, exactly as they were stored."""

    conversation_id: str
    header: bytes
    body: bytes | None
    messages: list[bytes]
    quarantined_at: dt.datetime
    usage: list[bytes] = msgspec.field(default_factory=list)
    # version records moved aside alone (``quarantine_versions``): (version, record bytes);
    # such a record holds the conversation's header as it was, no body and no messages
    versions: list[tuple[int, bytes]] = msgspec.field(default_factory=list)


_quarantine_encoder = msgspec.json.Encoder()
quarantine_decoder = msgspec.json.Decoder(QuarantinedRecord)


def open_databases(env: Any, path: Path, readonly: bool) -> Databases:
    """Open (a writer: create) every database and bring the layout up to date.

    Raises:
        IllegalStateError: the layout is newer than this code knows, or (read-only) older,
            which only a writing open can upgrade.
    """
    if readonly:
        return _open_readonly(env, path)
    dbs = Databases(*(env.open_db(name, dupsort=name == b"owners") for name in NAMES))
    with env.begin(write=True) as txn:
        layout = _layout_of(txn, dbs, path)
        if layout is None:
            upgrade(txn, dbs, path)
        if layout is None or layout < 4:
            split_ledgers(txn, dbs, path)
        if layout is None or layout < 3:
            seed_history(txn, dbs, path)
        if layout is None or layout < LAYOUT:
            txn.put(_LAYOUT_KEY, str(LAYOUT).encode(), db=dbs.meta)
    return dbs


def _open_readonly(env: Any, path: Path) -> Databases:
    try:
        dbs = Databases(*(env.open_db(name, create=False) for name in NAMES))
    except lmdb.NotFoundError:
        raise IllegalStateError(
            f"The store at {path} has an older layout (written by an older parlour); open "
            "it once for writing (LmdbStore(path)) to upgrade it in place, then read it."
        ) from None
    with env.begin() as txn:
        _layout_of(txn, dbs, path)
    return dbs


def _layout_of(txn: Any, dbs: Databases, path: Path) -> int | None:
    raw = txn.get(_LAYOUT_KEY, db=dbs.meta)
    layout = None if raw is None else int(bytes(raw))
    if layout is not None and layout > LAYOUT:
        raise IllegalStateError(
            f"The store at {path} has layout {layout}, newer than this parlour knows "
            f"(up to {LAYOUT}); upgrade parlour to open it."
        )
    return layout


def upgrade(txn: Any, dbs: Databases, path: Path) -> None:
    """Bring a layout-1 store (or an empty one) to this layout in one transaction: version
    every header (at least 1), build the owner index, quarantine headers that do not decode,
    record the layout."""
    keys = [bytes(key) for key in txn.cursor(db=dbs.heads).iternext(values=False)]
    for key in keys:
        try:
            old = legacy_header_decoder.decode(txn.get(key, db=dbs.heads))
        except (msgspec.DecodeError, RecursionError):
            logger.warning("upgrading {}: quarantined damaged conversation {!r}", path, key)
            quarantine(txn, dbs, key)
            continue
        head = Header(**msgspec.structs.asdict(old) | {"version": max(1, old.version)})
        txn.put(key, header_encoder.encode(head), db=dbs.heads)
        index(txn, dbs, head, key)
    if keys:
        logger.info(
            "upgraded the store at {} to layout {} ({} conversations)", path, LAYOUT, len(keys)
        )


def split_ledgers(txn: Any, dbs: Databases, path: Path) -> None:
    """Move each body's usage ledger (layouts 1 to 3 kept it inside) into one record per
    entry, and count it in the header. The header's history chain is dropped, so the next
    save records a checkpoint: a ledger delta never follows a record whose body held the
    ledger. A body or header that does not decode is left as it is (``damaged()`` and
    ``undecodable()`` find it)."""
    moved = 0
    for key, raw in list(txn.cursor(db=dbs.heads)):
        key = bytes(key)
        try:
            head = header_decoder.decode(raw)
            body = txn.get(key, db=dbs.bodies)
            snapshot = None if body is None else decode_snapshot(body, key.decode())
        except (msgspec.DecodeError, RecursionError, CorruptSnapshotError, UnicodeDecodeError):
            continue
        if snapshot is not None and snapshot.usage:
            txn.put(key, encode_body(snapshot), db=dbs.bodies)
            for i, entry in enumerate(snapshot.usage):
                txn.put(message_key(key, i), usage_encoder.encode(entry), db=dbs.usage)
            moved += 1
        usage_count = 0 if snapshot is None else len(snapshot.usage)
        head = msgspec.structs.replace(head, history=None, usage_count=usage_count)
        txn.put(key, header_encoder.encode(head), db=dbs.heads)
    if moved:
        logger.info("moved the usage ledgers of {} conversations at {} into records", moved, path)


def seed_history(txn: Any, dbs: Databases, path: Path) -> None:
    """Bring a store without version history to this layout: each conversation's current
    version becomes its first recorded one."""
    count = 0
    for key, raw in list(txn.cursor(db=dbs.heads)):
        try:
            head = header_decoder.decode(raw)
        except (msgspec.DecodeError, RecursionError):
            continue  # damaged: ``damaged()`` finds it, ``quarantine`` moves it
        _versions.seed(txn, dbs, bytes(key), head.version, head.updated_at)
        count += 1
    if count:
        logger.info("recorded the current version of {} conversations at {}", count, path)


def index(txn: Any, dbs: Databases, head: Header, key: bytes) -> None:
    txn.put(head.user_id.encode(), order_bytes(head.updated_at, key), db=dbs.owners)


def reindex(txn: Any, dbs: Databases, old: Header | None, head: Header, key: bytes) -> None:
    """Move ``key``'s owner-index entry from ``old`` (None: a new record) to ``head``; nothing
    to do when the update time, all the entry holds besides the id, did not change."""
    if old is not None:
        if old.updated_at == head.updated_at and old.user_id == head.user_id:
            return
        unindex(txn, dbs, old, key)
    index(txn, dbs, head, key)


def unindex(txn: Any, dbs: Databases, head: Header, key: bytes) -> None:
    txn.delete(head.user_id.encode(), order_bytes(head.updated_at, key), db=dbs.owners)


def remove(txn: Any, dbs: Databases, key: bytes, head: Header) -> None:
    """Delete every record of ``key`` (whose header is ``head``) and its history, unindex
    it and leave a tombstone at its last version."""
    txn.delete(key, db=dbs.heads)
    txn.delete(key, db=dbs.bodies)
    for index in range(head.message_count):
        txn.delete(message_key(key, index), db=dbs.messages)
    for index in range(head.usage_count):
        txn.delete(message_key(key, index), db=dbs.usage)
    unindex(txn, dbs, head, key)
    bury(txn, dbs, key, head.version)
    _versions.drop(txn, dbs, key)


def last_version(txn: Any, dbs: Databases, key: bytes) -> int:
    """The last version a deleted id had (0 for an id never deleted)."""
    raw = txn.get(key, db=dbs.tombstones)
    return 0 if raw is None else int.from_bytes(raw, "big")


def bury(txn: Any, dbs: Databases, key: bytes, version: int) -> None:
    txn.put(key, version.to_bytes(8, "big"), db=dbs.tombstones)


def quarantine(txn: Any, dbs: Databases, key: bytes) -> bool:
    """Move every record of ``key`` into quarantine, raw; drop its owner-index entries.
    Leaves a tombstone past any version the record can have had. False when there is none."""
    header = txn.get(key, db=dbs.heads)
    if header is None:
        return False
    header = bytes(header)
    body = txn.get(key, db=dbs.bodies)
    record = QuarantinedRecord(
        conversation_id=key.decode(errors="replace"),
        header=header,
        body=None if body is None else bytes(body),
        messages=_pop_records(txn, dbs.messages, key),
        quarantined_at=dt.datetime.now(dt.UTC),
        usage=_pop_records(txn, dbs.usage, key),
    )
    stamp = (record.quarantined_at - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(
        microseconds=1
    )
    txn.put(
        key + b"\x00" + stamp.to_bytes(8, "big"),
        _quarantine_encoder.encode(record),
        db=dbs.quarantine,
    )
    txn.delete(key, db=dbs.heads)
    txn.delete(key, db=dbs.bodies)
    _unindex_everywhere(txn, dbs, key)
    bury(txn, dbs, key, max(last_version(txn, dbs, key), _salvaged_version(header), stamp))
    return True


def quarantine_versions(txn: Any, dbs: Databases, key: bytes, run: list[tuple[int, bytes]]) -> None:
    """Move ``run`` (version numbers and their records, raw) out of ``versions`` into
    quarantine, beside the conversation's header as it is; the conversation stays where
    it is."""
    if not run:
        return
    for number, _ in run:
        txn.delete(_versions.version_key(key, number), db=dbs.versions)
    header = txn.get(key, db=dbs.heads)
    record = QuarantinedRecord(
        conversation_id=key.decode(errors="replace"),
        header=b"" if header is None else bytes(header),
        body=None,
        messages=[],
        quarantined_at=dt.datetime.now(dt.UTC),
        versions=run,
    )
    _put_quarantined(txn, dbs, key, record)


def _put_quarantined(txn: Any, dbs: Databases, key: bytes, record: QuarantinedRecord) -> None:
    stamp = (record.quarantined_at - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(
        microseconds=1
    )
    while txn.get(key + b"\x00" + stamp.to_bytes(8, "big"), db=dbs.quarantine) is not None:
        stamp += 1  # two quarantines of one conversation within a microsecond: both kept
    txn.put(
        key + b"\x00" + stamp.to_bytes(8, "big"),
        _quarantine_encoder.encode(record),
        db=dbs.quarantine,
    )


def _pop_records(txn: Any, db: Any, key: bytes) -> list[bytes]:
    """Remove every message (or ledger) record of ``key`` in ``db``; their bytes, in order."""
    prefix = message_prefix(key)
    found: list[tuple[bytes, bytes]] = []
    cursor = txn.cursor(db=db)
    if cursor.set_range(prefix):
        for item_key, value in cursor:
            if not bytes(item_key).startswith(prefix):
                break
            found.append((bytes(item_key), bytes(value)))
    for item_key, _ in found:
        txn.delete(item_key, db=db)
    return [value for _, value in found]


def _unindex_everywhere(txn: Any, dbs: Databases, key: bytes) -> None:
    """Drop every owner-index entry naming ``key`` (the owner may be unreadable: a scan)."""
    stale = [
        (bytes(user), bytes(entry))
        for user, entry in txn.cursor(db=dbs.owners)
        if bytes(entry)[8:] == key
    ]
    for user, entry in stale:
        txn.delete(user, entry, db=dbs.owners)


def _salvaged_version(header: bytes) -> int:
    """The version a damaged header still shows, if any; 0 otherwise."""
    try:
        version = msgspec.json.decode(header).get("version", 0)
    except (msgspec.DecodeError, RecursionError, AttributeError):
        return 0
    return version if isinstance(version, int) else 0
