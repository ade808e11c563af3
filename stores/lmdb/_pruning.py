"""Pruning one conversation's version history to its retention: the versions before the
oldest kept one go, that one made a whole copy first when it is a delta (``_materialize``:
its chain is about to lose its start), so every kept version still reads."""

from __future__ import annotations

import itertools
from typing import Any

from .._records import message_prefix
from . import _versions
from ._databases import Databases


def prune(txn: Any, dbs: Databases, key: bytes, retention: _versions.Retention) -> int:
    """Apply ``retention`` to ``key``'s versions: the oldest kept one becomes a checkpoint
    first (so every kept version still reads), then the older ones go. Returns how many
    went."""
    if retention.keep is None and retention.keep_for is None:
        return 0
    if retention.keep_for is None:  # by count alone: the keys, and the oldest kept record
        assert retention.keep is not None
        return _prune_count(txn, dbs, key, retention.keep)
    versions = _versions.kept(txn, dbs, key)
    cutoff = None if retention.keep_for is None else retention.now() - retention.keep_for
    keep_from = len(versions) - 1  # the current version always stays
    for i in range(len(versions) - 1):
        by_count = retention.keep is None or len(versions) - i <= retention.keep
        by_age = cutoff is None or versions[i].saved_at >= cutoff
        if by_count and by_age:
            keep_from = i
            break
    if keep_from <= 0:
        return 0
    oldest = versions[keep_from]
    if not oldest.checkpoint:
        _materialize(txn, dbs, key, oldest)
    for item in versions[:keep_from]:
        txn.delete(_versions.version_key(key, item.version), db=dbs.versions)
    return keep_from


def _prune_count(txn: Any, dbs: Databases, key: bytes, keep: int) -> int:
    """``prune`` by count alone: every record but the newest ``keep`` goes, the oldest one
    kept made a checkpoint first. Only keys are read: the newest ``keep`` of them walked
    back from the conversation's end at C speed, then the older ones deleted in order."""
    prefix = message_prefix(key)
    cursor = txn.cursor(db=dbs.versions)
    if not _versions.at_newest(cursor, prefix):
        return 0
    newest = list(itertools.islice(cursor.iterprev(keys=True, values=False), keep + 1))
    if len(newest) <= keep or not bytes(newest[keep]).startswith(prefix):
        return 0  # no more than ``keep`` of its records (the next key is another's)
    oldest = bytes(newest[keep - 1])
    raw = txn.get(oldest, db=dbs.versions)
    if bytes(raw[:1]) not in _versions.CHECKPOINTS:
        version = int.from_bytes(oldest[len(prefix) :], "big")
        _materialize(txn, dbs, key, _versions.Kept(version, _versions.moment(raw), False))
    gone = 0
    cursor.set_range(prefix)
    while bytes(cursor.key()) < oldest:  # every key before it is the conversation's
        cursor.delete()
        gone += 1
    return gone


class Unbuildable(Exception):
    """A prune could not rebuild ``version``, the oldest it keeps, from its chain: a record
    at or before it is damaged (the cause says how). Nothing was removed yet."""

    def __init__(self, version: int) -> None:
        super().__init__(f"version {version} cannot be rebuilt from its chain")
        self.version = version


def _materialize(txn: Any, dbs: Databases, key: bytes, item: _versions.Kept) -> None:
    try:
        held = _versions.state(txn, dbs, key, item.version)
    except (KeyError, ValueError, IndexError) as exc:  # a damaged record, a broken chain
        raise Unbuildable(item.version) from exc
    assert held is not None  # listed by kept() in this transaction
    usage = held.usage
    payload = _versions.Payload(
        held.body,
        len(held.messages),
        list(enumerate(held.messages)),
        None if usage is None else len(usage),
        [] if usage is None else list(enumerate(usage)),
    )
    txn.put(
        _versions.version_key(key, item.version),
        _versions.encoded(_versions.CHECKPOINT, item.saved_at, payload),
        db=dbs.versions,
    )
