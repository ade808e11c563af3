"""LmdbStore's version history: every save kept as what it wrote, with periodic checkpoints.

A version record (``versions``: id + NUL + 8-byte version -> record) is a kind byte
(``C`` checkpoint, ``D`` delta), the save's time (8 bytes, microseconds since the epoch)
and a msgpack ``Payload``: the body (empty in a delta whose save left it as it was: no
body is empty; since layout 5), the message count, the messages written (index, bytes):
every message for a checkpoint, the changed ones for a delta, and the same two for the
usage ledger (absent from records written before layout 4, whose bodies hold their ledger).
Reading version N starts at the newest checkpoint at or before N and replays the deltas
after it, each body replacing the one before unless empty.

The chain (deltas since the checkpoint, their bytes, the checkpoint's bytes), kept in the
conversation's header as its version left it, decides when a save is a checkpoint: when its
delta would make the chain longer than ``MAX_CHAIN`` records or its messages heavier than
the checkpoint's, or when the previous version was not recorded with a chain; so does the
retention: a version the next prune will keep oldest is one (``Retention.whole_at``). (Stores
written before kept it in ``chains``, id -> four 8-byte integers; the code reads it no
more, and drops it with the history.) So a read replays at most ``MAX_CHAIN`` deltas and
about twice a full copy's message bytes (a read uses only the last body it meets), and a
conversation's history costs about what its saves wrote plus a few full copies.
"""

from __future__ import annotations

import datetime as dt
import itertools
import operator
from collections.abc import Callable
from typing import Any, NamedTuple

import msgspec

from parlour.runtime.errors import CorruptSnapshotError

from .._checked import Run
from .._records import Chain, message_prefix
from ._databases import Databases

MAX_CHAIN = 256  # most deltas after a checkpoint
# the deltas' message bytes a chain may reach before a checkpoint is due, however small
# its checkpoint: a young conversation's saves are not each a full copy
CHAIN_FLOOR = 16 * 1024
PRUNE_EVERY = 64  # a save whose version is a multiple of this prunes its conversation
_MOST_MISSING = 1 << 20  # records a replay may count without holding them: past it, damage
CHECKPOINT, DELTA = b"C", b"D"
_SAME_BODY = b""  # a delta's body when its save left the body as it was (no body is empty)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


class Payload(msgspec.Struct, array_like=True):
    """What one version record holds after its kind and time: the body, the message count
    and the messages written; the ledger's count and the entries written (a count of None:
    a record from before layout 4, whose body holds the ledger)."""

    body: bytes
    count: int
    writes: list[tuple[int, bytes]]
    usage_count: int | None = None
    usage: list[tuple[int, bytes]] = msgspec.field(default_factory=list)


class State(NamedTuple):
    """A version as its save left it: the body, the message records, the ledger's records
    (None: the body holds the ledger, as before layout 4)."""

    body: bytes
    messages: list[bytes]
    usage: list[bytes] | None


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Payload)


class Kept(NamedTuple):
    """One recorded version: its number, when it was saved, whether it is a checkpoint."""

    version: int
    saved_at: dt.datetime
    checkpoint: bool


class Retention(NamedTuple):
    """Which versions to keep: the newest ``keep`` (None: all) and those younger than
    ``keep_for`` (None: any age). The current version always stays. ``whole_at``: the
    remainder, modulo ``PRUNE_EVERY``, of the versions a save's own prune will keep oldest
    (by count alone: each is recorded as a checkpoint when saved, so the prune rebuilds
    none; None: no such versions). Made by ``of``."""

    keep: int | None
    keep_for: dt.timedelta | None
    now: Callable[[], dt.datetime]
    whole_at: int | None = None

    @classmethod
    def of(
        cls, keep: int | None, keep_for: dt.timedelta | None, now: Callable[[], dt.datetime]
    ) -> Retention:
        # the prune at version 64k keeps 64k - keep + 1 onwards
        by_count = None if keep is None or keep_for is not None else (1 - keep) % PRUNE_EVERY
        return cls(keep, keep_for, now, by_count)


def version_key(key: bytes, version: int) -> bytes:
    return message_prefix(key) + version.to_bytes(8, "big")


def _micros(moment: dt.datetime) -> int:
    return (moment - _EPOCH) // _MICROSECOND


def _moment(raw: bytes | memoryview) -> dt.datetime:
    return _EPOCH + int.from_bytes(raw[1:9], "big") * _MICROSECOND


def _record(kind: bytes, saved_at: dt.datetime, payload: Payload) -> bytes:
    return kind + _micros(saved_at).to_bytes(8, "big") + _encoder.encode(payload)


def record(
    txn: Any,
    dbs: Databases,
    key: bytes,
    version: int,
    saved_at: dt.datetime,
    body: bytes | None,
    count: int,
    writes: Run,
    usage_count: int,
    usage: Run,
    chain: Chain | None,
    checkpoint: bool = False,
) -> Chain:
    """Record the save that left ``body`` (as its record holds it, packed or not; None: the
    body the previous version left, as stored), ``count`` messages of which it wrote
    ``writes``, and ``usage_count`` ledger entries of which it wrote ``usage``, as
    ``version``: a delta of what it wrote (an empty body when it left the body as it was),
    or a checkpoint of the body and every message and ledger entry when the chain calls for
    one or ``checkpoint`` asks (a version a coming prune keeps oldest: see
    ``Retention.whole_at``). ``chain`` is what the previous version left (None: it was not
    recorded with one). Returns the chain this version leaves, for its header."""
    size = sum(len(data) for _, data in writes) + sum(len(data) for _, data in usage)
    if (
        checkpoint
        or chain is None
        or (len(writes) == count and len(usage) == usage_count)
        or chain[0] >= MAX_CHAIN
        or chain[1] + size > max(chain[2], CHAIN_FLOOR)
    ):
        # the records as this save left them: the stored bytes, none encoded again
        if body is None:  # the body as stored (packed or not): an append leaves it as it was
            stored = txn.get(key, db=dbs.bodies)
            if stored is None:
                raise CorruptSnapshotError(
                    f"Stored conversation {key.decode(errors='replace')} has no body record."
                )
            body = bytes(stored)
        writes = _all_of(txn, dbs.messages, key, writes, count)
        entries = _all_of(txn, dbs.usage, key, usage, usage_count)
        payload = Payload(body, count, writes, usage_count, entries)
        txn.put(version_key(key, version), _record(CHECKPOINT, saved_at, payload), db=dbs.versions)
        return (0, 0, sum(map(len, map(operator.itemgetter(1), writes + entries))))
    kept = _SAME_BODY if body is None else body
    payload = Payload(kept, count, writes, usage_count, usage)
    txn.put(version_key(key, version), _record(DELTA, saved_at, payload), db=dbs.versions)
    return (chain[0] + 1, chain[1] + size, chain[2])


def _all_of(
    txn: Any, db: Any, key: bytes, writes: list[tuple[int, bytes]], count: int
) -> list[tuple[int, bytes]]:
    """Every one of ``count`` records: the plan's writes when they are all, else the
    records the save just left (one cursor range)."""
    if len(writes) == count:
        return writes
    return list(enumerate(_raw_records(txn, db, key, count)))


def seed(txn: Any, dbs: Databases, key: bytes, version: int, saved_at: dt.datetime) -> None:
    """Record the stored state of ``key`` as a checkpoint of ``version`` (the upgrade of a
    store written before history: its current versions become the first recorded)."""
    body = txn.get(key, db=dbs.bodies)
    if body is None:
        return
    messages = _raw_records(txn, dbs.messages, key)
    usage = _raw_records(txn, dbs.usage, key)
    payload = Payload(
        bytes(body), len(messages), list(enumerate(messages)), len(usage), list(enumerate(usage))
    )
    txn.put(version_key(key, version), _record(CHECKPOINT, saved_at, payload), db=dbs.versions)


def _raw_records(txn: Any, db: Any, key: bytes, limit: int | None = None) -> list[bytes]:
    """The stored message (or ledger) records of ``key`` in ``db`` (at most ``limit``), in
    order."""
    prefix = message_prefix(key)
    cursor = txn.cursor(db=db)
    found: list[bytes] = []
    if limit and cursor.set_range(prefix):
        # the usual call (a save's checkpoint): ``limit`` records, taken at C speed when the
        # last of them is still the conversation's (its keys sort together: so are all)
        items = list(itertools.islice(cursor.iternext(), limit))
        if len(items) == limit and all(bytes(items[i][0]).startswith(prefix) for i in (0, -1)):
            return list(map(bytes, map(operator.itemgetter(1), items)))
    if cursor.set_range(prefix):
        for item_key, value in cursor:
            if len(found) == limit or not bytes(item_key).startswith(prefix):
                break
            found.append(bytes(value))
    return found


def kept(txn: Any, dbs: Databases, key: bytes) -> list[Kept]:
    """Every recorded version of ``key``, oldest first."""
    prefix = message_prefix(key)
    cursor = txn.cursor(db=dbs.versions)
    found: list[Kept] = []
    if cursor.set_range(prefix):
        for item_key, value in cursor:
            item = bytes(item_key)
            if not item.startswith(prefix):
                break
            version = int.from_bytes(item[len(prefix) :], "big")
            found.append(Kept(version, _moment(value), bytes(value[:1]) == CHECKPOINT))
    return found


def as_of(txn: Any, dbs: Databases, key: bytes, at: dt.datetime) -> int | None:
    """The newest recorded version saved at or before ``at``."""
    found = [k.version for k in kept(txn, dbs, key) if k.saved_at <= at]
    return found[-1] if found else None


def state(txn: Any, dbs: Databases, key: bytes, version: int) -> State | None:
    """The body, messages and ledger of ``version`` exactly as that save left them,
    replayed from the newest checkpoint at or before it; None when it is not recorded.

    Raises:
        KeyError: the chain is broken (no checkpoint, or a ledger delta after a record
            without its ledger).
    """
    if txn.get(version_key(key, version), db=dbs.versions) is None:
        return None
    body, messages, usage = b"", list[bytes](), None
    for i, payload in enumerate(_chain_to(txn, dbs, key, version)):  # a checkpoint first
        body = payload.body or body  # empty: the body as the record before left it
        _replay(messages, payload.count, payload.writes)
        if payload.usage_count is None:
            usage = None  # the body holds the ledger
        elif i and usage is None:
            raise KeyError(f"version {version} of {key!r} replays a ledger with no start")
        else:
            usage = _replay([] if usage is None else usage, payload.usage_count, payload.usage)
    return State(body, messages, usage)


def _replay(held: list[bytes], count: int, writes: list[tuple[int, bytes]]) -> list[bytes]:
    """``held`` cut or extended to ``count`` records, then ``writes`` applied (in place).

    Raises:
        IndexError: a write past ``count`` (a damaged record).
        ValueError: ``count`` is negative or far past what the records hold (a damaged
            record, never a huge allocation; a checkpoint taken over a missing record counts
            a few it does not hold, and a load then names the gap)."""
    if not 0 <= count <= len(held) + len(writes) + _MOST_MISSING:
        raise ValueError(f"a version record counts {count} records of {len(held) + len(writes)}")
    del held[count:]
    if count > len(held):
        held.extend([b""] * (count - len(held)))
    for index, data in writes:
        held[index] = data
    return held


def _chain_to(txn: Any, dbs: Databases, key: bytes, version: int) -> list[Payload]:
    """The records from the newest checkpoint at or before ``version`` up to it, in order."""
    prefix = message_prefix(key)
    cursor = txn.cursor(db=dbs.versions)
    cursor.set_key(version_key(key, version))
    chain: list[Payload] = []
    while True:
        item, value = bytes(cursor.key()), cursor.value()
        if not item.startswith(prefix):
            raise KeyError(f"version {version} of {key!r} has no checkpoint")
        chain.append(_decoder.decode(value[9:]))
        if bytes(value[:1]) == CHECKPOINT:
            return chain[::-1]
        if not cursor.prev():
            raise KeyError(f"version {version} of {key!r} has no checkpoint")


def drop(txn: Any, dbs: Databases, key: bytes) -> None:
    """Remove every recorded version of ``key`` (its conversation was deleted)."""
    for version in _numbers(txn, dbs, key):
        txn.delete(version_key(key, version), db=dbs.versions)
    txn.delete(key, db=dbs.chains)


def _numbers(txn: Any, dbs: Databases, key: bytes) -> list[int]:
    """The recorded version numbers of ``key``, oldest first (keys only: no value read)."""
    prefix = message_prefix(key)
    cursor = txn.cursor(db=dbs.versions)
    found: list[int] = []
    if cursor.set_range(prefix):
        for item in cursor.iternext(keys=True, values=False):
            item = bytes(item)
            if not item.startswith(prefix):
                break
            found.append(int.from_bytes(item[len(prefix) :], "big"))
    return found


def prune(txn: Any, dbs: Databases, key: bytes, retention: Retention) -> int:
    """Apply ``retention`` to ``key``'s versions: the oldest kept one becomes a checkpoint
    first (so every kept version still reads), then the older ones go. Returns how many
    went."""
    if retention.keep is None and retention.keep_for is None:
        return 0
    if retention.keep_for is None:  # by count alone: the keys, and the oldest kept record
        assert retention.keep is not None
        return _prune_count(txn, dbs, key, retention.keep)
    versions = kept(txn, dbs, key)
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
        txn.delete(version_key(key, item.version), db=dbs.versions)
    return keep_from


def _prune_count(txn: Any, dbs: Databases, key: bytes, keep: int) -> int:
    """``prune`` by count alone: every record but the newest ``keep`` goes, the oldest one
    kept made a checkpoint first. Only keys are read: the newest ``keep`` of them walked
    back from the conversation's end at C speed, then the older ones deleted in order."""
    prefix = message_prefix(key)
    cursor = txn.cursor(db=dbs.versions)
    if cursor.set_range(prefix + _PAST):  # the first key after the conversation's records
        if not cursor.prev():
            return 0
    elif not cursor.last():
        return 0
    newest = list(itertools.islice(cursor.iterprev(keys=True, values=False), keep + 1))
    if len(newest) <= keep or not bytes(newest[keep]).startswith(prefix):
        return 0  # no more than ``keep`` of its records (the next key is another's)
    oldest = bytes(newest[keep - 1])
    raw = txn.get(oldest, db=dbs.versions)
    if bytes(raw[:1]) != CHECKPOINT:
        version = int.from_bytes(oldest[len(prefix) :], "big")
        _materialize(txn, dbs, key, Kept(version, _moment(raw), False))
    gone = 0
    cursor.set_range(prefix)
    while bytes(cursor.key()) < oldest:  # every key before it is the conversation's
        cursor.delete()
        gone += 1
    return gone


_PAST = b"\xff" * 9  # after every version key of a conversation's prefix (8-byte numbers)


class Unbuildable(Exception):
    """A prune could not rebuild ``version``, the oldest it keeps, from its chain: a record
    at or before it is damaged (the cause says how). Nothing was removed yet."""

    def __init__(self, version: int) -> None:
        super().__init__(f"version {version} cannot be rebuilt from its chain")
        self.version = version


def _materialize(txn: Any, dbs: Databases, key: bytes, item: Kept) -> None:
    try:
        held = state(txn, dbs, key, item.version)
    except (KeyError, ValueError, IndexError) as exc:  # a damaged record, a broken chain
        raise Unbuildable(item.version) from exc
    assert held is not None  # listed by kept() in this transaction
    usage = held.usage
    payload = Payload(
        held.body,
        len(held.messages),
        list(enumerate(held.messages)),
        None if usage is None else len(usage),
        [] if usage is None else list(enumerate(usage)),
    )
    txn.put(
        version_key(key, item.version),
        _record(CHECKPOINT, item.saved_at, payload),
        db=dbs.versions,
    )
