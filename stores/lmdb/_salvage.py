"""Damaged version records: found (``unreadable``, for ``parlour fsck``) and moved aside
(``salvage``, when a prune meets one, or on ``fsck --quarantine``), so a damaged past never
blocks a save.

A version reads by replaying the records from the newest checkpoint at or before it; one
damaged record (it does not decode, or its replay does not fit) makes every version whose
replay passes through it unreadable: from that checkpoint up to the next one. ``salvage``
moves that run of records into quarantine as raw bytes (a ``QuarantinedRecord`` holding
them as its ``versions``; those that referred to the stored records given theirs first)
and, when the run reached the newest record, records the conversation's current state as a
checkpoint, so the current version and every later one read again. The current record
itself (header, body, messages, ledger) is never touched.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from parlour.runtime.errors import CorruptSnapshotError

from .._records import decode_record, message_prefix
from . import _layout, _versions
from ._databases import Databases

# what replaying a damaged chain raises: a record that does not decode (msgspec's
# DecodeError is a ValueError), a write past its count, a chain with no checkpoint
DAMAGE = (KeyError, ValueError, IndexError)


def damaged_version(cid: str, version: int, exc: BaseException) -> CorruptSnapshotError:
    """The error a damaged version surfaces as, naming the conversation and the version."""
    return CorruptSnapshotError(
        f"Version {version} of stored conversation {cid} is damaged and does not read: {exc}"
    )


def salvage(
    txn: Any,
    dbs: Databases,
    key: bytes,
    version: int,
    current: tuple[int, dt.datetime] | None,
    whole_chain: bool,
) -> list[int]:
    """Move the unreadable run of version records at ``version`` into quarantine, raw: from
    ``version`` (the first that does not read: those before it do), or with
    ``whole_chain`` from the checkpoint at or before it (else the first record: a prune
    that cannot rebuild ``version`` knows only that the damage is at or before it), up to
    the next checkpoint after it, else the newest. When the run took the newest record,
    ``current`` (the stored version and its time; None: the header does not read) is
    recorded anew as a checkpoint of what is stored. Records that refer to the stored
    records get their bytes first (``_versions.pin``; one that cannot is damaged, and
    moved with its run). Returns the versions moved, oldest first (empty: ``version`` is
    not recorded)."""
    _versions.pin(txn, dbs, key)  # what goes into quarantine holds bytes, not references
    records = _records(txn, dbs, key)
    numbers = [number for number, _ in records]
    if version not in numbers:
        return []
    at = numbers.index(version)
    start = at
    if whole_chain:
        checkpoints = [i for i in range(at + 1) if records[i][1][:1] in _versions.CHECKPOINTS]
        start = checkpoints[-1] if checkpoints else 0
    end = next(
        (i for i in range(at + 1, len(records)) if records[i][1][:1] in _versions.CHECKPOINTS),
        len(records),
    )
    run = records[start:end]
    _layout.quarantine_versions(txn, dbs, key, run)
    if end == len(records) and current is not None:
        _versions.seed(txn, dbs, key, *current)
    return [number for number, _ in run]


def _records(txn: Any, dbs: Databases, key: bytes) -> list[tuple[int, bytes]]:
    """Every version record of ``key``, raw, oldest first."""
    prefix = message_prefix(key)
    cursor = txn.cursor(db=dbs.versions)
    found: list[tuple[int, bytes]] = []
    if cursor.set_range(prefix):
        for item, value in cursor:
            item = bytes(item)
            if not item.startswith(prefix):
                break
            found.append((int.from_bytes(item[len(prefix) :], "big"), bytes(value)))
    return found


def unreadable(txn: Any, dbs: Databases, key: bytes, cid: str, owner: str) -> list[tuple[int, str]]:
    """Every recorded version of ``key`` that does not read (its replay fails, or what it
    replays to does not decode as a load would), with why, oldest first."""
    found = []
    for kept in _versions.kept(txn, dbs, key):
        try:
            held = _versions.state(txn, dbs, key, kept.version)
            if held is not None:
                ledger = None if held.usage is None else (len(held.usage), held.usage)
                decode_record(cid, owner, len(held.messages), held.body, held.messages, ledger)
        except (*DAMAGE, CorruptSnapshotError, RecursionError) as exc:
            found.append((kept.version, str(exc) or type(exc).__name__))
    return found
