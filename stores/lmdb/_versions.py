"""LmdbStore's version history: every save kept as what it wrote, with periodic checkpoints.

A version record (``versions``: id + NUL + 8-byte version -> record) is a kind byte, the
save's time (8 bytes, microseconds since the epoch) and a msgpack ``Payload``: the body
(empty in a delta whose save left it as it was: no body is empty; since layout 5), the
message count, the messages written (index, bytes), and the same two for the usage ledger
(absent from records written before layout 4, whose bodies hold their ledger). The kinds:

- ``C``, a checkpoint: the body and every message and ledger entry, their bytes;
- ``D``, a delta: the changed messages and entries, and the body when it changed;
- ``S`` (since layout 7), a checkpoint of what is stored: no bytes, only the counts; the
  body, messages ``0..count`` and entries ``0..usage_count`` are the conversation's records;
- ``A`` (since layout 7), an append: no bytes; the body as the version before left it, the
  messages from ``start`` to ``count`` and the entries from ``usage_start`` to
  ``usage_count`` are the conversation's records.

So the usual save (an append) records a few bytes instead of a second copy of what it
wrote, and a checkpoint costs nothing. A record that refers to the stored records holds only
while they stay as they are: a save that overwrites or removes any (a whole save that
changed the body, rewrote a message, cut the conversation) first turns every such record
into its ``C`` or ``D`` twin with the bytes (``pin``), in its own transaction; so does moving
version records into quarantine (``_salvage``). Only a ``D`` is written after a pin, so
``pin`` walks back from the newest record to the newest ``D``. A damaged body or message
record is then also a damaged version for each record that refers to it (before, each
version held its own copy).

Reading version N starts at the newest checkpoint at or before N and replays the records
after it, each body replacing the one before unless empty. The chain (records since the
checkpoint, their bytes, the checkpoint's bytes), kept in the conversation's header as its
version left it, decides when a save is a checkpoint: when its record would make the chain
longer than ``MAX_CHAIN`` records or its bytes heavier than the checkpoint's (and than
``CHAIN_FLOOR``), or when the previous version was not recorded with a chain; so does the
retention: a version the next prune will keep oldest is one (``Retention.whole_at``). (Stores
written before kept it in ``chains``, id -> four 8-byte integers; the code reads it no
more, and drops it with the history.) So a read replays at most ``MAX_CHAIN`` records.
Pruning is ``_pruning``'s.

Why this module is long: the record's format, how a save chooses its kind (``record``),
how a read resolves a reference (``state``) and how a save pins one (``pin``) hold one
invariant between them (only a ``D`` follows a pin; a reference holds while ``only_adds``),
which reads best in one place.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, NamedTuple

import msgspec

from .._checked import Run
from .._records import Chain, message_key, message_prefix
from ._databases import Databases

MAX_CHAIN = 256  # most deltas after a checkpoint
# the deltas' message bytes a chain may reach before a checkpoint is due, however small
# its checkpoint: a young conversation's saves are not each a full copy
CHAIN_FLOOR = 16 * 1024
PRUNE_EVERY = 64  # a save whose version is a multiple of this prunes its conversation
_MOST_MISSING = 1 << 20  # records a replay may count without holding them: past it, damage
CHECKPOINT, DELTA, STORED, APPENDED = b"C", b"D", b"S", b"A"
CHECKPOINTS = (CHECKPOINT, STORED)  # the kinds a replay starts from
REFERRING = (STORED, APPENDED)  # the kinds that hold stored records by reference
_PAST = b"\xff" * 9  # after every version key of a conversation's prefix (8-byte numbers)
_SAME_BODY = b""  # a delta's body when its save left the body as it was (no body is empty)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


class Payload(msgspec.Struct, array_like=True):
    """What one version record holds after its kind and time: the body, the message count
    and the messages written; the ledger's count and the entries written (a count of None:
    a record from before layout 4, whose body holds the ledger); for an ``A`` record, where
    its stored messages and entries start."""

    body: bytes
    count: int
    writes: list[tuple[int, bytes]]
    usage_count: int | None = None
    usage: list[tuple[int, bytes]] = msgspec.field(default_factory=list)
    start: int = 0
    usage_start: int = 0


class State(NamedTuple):
    """A version as its save left it: the body, the message records, the ledger's records
    (None: the body holds the ledger, as before layout 4)."""

    body: bytes
    messages: list[bytes]
    usage: list[bytes] | None


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Payload)


class Kept(NamedTuple):
    """One recorded version: its number, when it was saved, whether it is a checkpoint
    (``C`` or ``S``)."""

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


def _micros(at: dt.datetime) -> int:
    return (at - _EPOCH) // _MICROSECOND


def moment(raw: bytes | memoryview) -> dt.datetime:
    """When the version whose record is ``raw`` was saved."""
    return _EPOCH + int.from_bytes(raw[1:9], "big") * _MICROSECOND


def encoded(kind: bytes, saved_at: dt.datetime, payload: Payload) -> bytes:
    """A version record of ``kind`` saved at ``saved_at`` holding ``payload``."""
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
    start: int = 0,
    usage_start: int = 0,
) -> Chain:
    """Record the save that left ``body`` (as its record holds it, packed or not; None: the
    body the previous version left, as stored), ``count`` messages of which it wrote
    ``writes``, and ``usage_count`` ledger entries of which it wrote ``usage``, as
    ``version``; ``start`` and ``usage_start`` are the previous version's counts. A
    checkpoint of what is stored (``S``) when the chain calls for one or ``checkpoint``
    asks (a version a coming prune keeps oldest: see ``Retention.whole_at``); an append
    (``A``) when the save left the body and every record before ``start`` and
    ``usage_start`` as they were; else a delta of what it wrote (its caller pinned the
    records that refer to what it overwrote: ``pin``). ``chain`` is what the previous
    version left (None: it was not recorded with one). Returns the chain this version
    leaves, for its header."""
    appended = body is None and only_adds(count, writes, start, usage_count, usage, usage_start)
    size = 0 if appended else sum(len(data) for _, data in writes) + sum(len(d) for _, d in usage)
    if (
        checkpoint
        or chain is None
        or (len(writes) == count and len(usage) == usage_count)
        or chain[0] >= MAX_CHAIN
        or chain[1] + size > max(chain[2], CHAIN_FLOOR)
    ):
        payload = Payload(b"", count, [], usage_count, [])
        txn.put(version_key(key, version), encoded(STORED, saved_at, payload), db=dbs.versions)
        return (0, 0, 0)
    if appended:
        payload = Payload(b"", count, [], usage_count, [], start, usage_start)
        txn.put(version_key(key, version), encoded(APPENDED, saved_at, payload), db=dbs.versions)
        return (chain[0] + 1, chain[1], chain[2])
    payload = Payload(_SAME_BODY if body is None else body, count, writes, usage_count, usage)
    txn.put(version_key(key, version), encoded(DELTA, saved_at, payload), db=dbs.versions)
    return (chain[0] + 1, chain[1] + size, chain[2])


def only_adds(
    count: int, writes: Run, start: int, usage_count: int, usage: Run, usage_start: int
) -> bool:
    """True when a save that left ``count`` messages (``writes`` written) and
    ``usage_count`` ledger entries (``usage`` written) only added past ``start`` and
    ``usage_start``, the previous counts: it overwrote and removed none of those records,
    so a version that refers to them still holds."""
    return (
        count >= start
        and usage_count >= usage_start
        and all(index >= start for index, _ in writes)
        and all(index >= usage_start for index, _ in usage)
    )


def at_newest(cursor: Any, prefix: bytes) -> bool:
    """Put ``cursor`` (over ``versions``) on the last key at or before the end of the
    records under ``prefix``, a conversation's: its newest record when it has one, else
    another's (the caller checks the prefix). False when there is no such key."""
    found: bool = cursor.prev() if cursor.set_range(prefix + _PAST) else cursor.last()
    return found


def pin(txn: Any, dbs: Databases, key: bytes) -> list[tuple[int, bytes]]:
    """Give every record of ``key`` that refers to its stored records (``S``, ``A``) the
    bytes it refers to (``C``, ``D``), before a save overwrites or removes them. Walks
    back from the newest record to the newest ``D``: every record before a ``D`` was
    pinned by the save that wrote it. Returns the records that could not be (they do not
    decode, or refer to a missing body), raw, left where they are: they read as damaged
    now, but would read as what a save writes once it overwrites the records they refer
    to (``History.pin`` moves them into quarantine first)."""
    prefix = message_prefix(key)
    cursor = txn.cursor(db=dbs.versions)
    found = at_newest(cursor, prefix)
    referring: list[tuple[bytes, bytes]] = []
    while found:
        item, raw = bytes(cursor.key()), cursor.value()
        kind = bytes(raw[:1])
        if not item.startswith(prefix) or kind == DELTA:
            break
        if kind in REFERRING:
            referring.append((item, bytes(raw)))
        found = cursor.prev()
    broken: list[tuple[int, bytes]] = []
    for item, raw in referring:
        try:
            kind, payload = _resolved(txn, dbs, key, raw[:1], _decoder.decode(raw[9:]))
        except (KeyError, ValueError, IndexError):  # msgspec's DecodeError is a ValueError
            broken.append((int.from_bytes(item[len(prefix) :], "big"), raw))
            continue
        txn.put(item, kind + raw[1:9] + _encoder.encode(payload), db=dbs.versions)
    return broken[::-1]


def _resolved(
    txn: Any, dbs: Databases, key: bytes, kind: bytes, payload: Payload
) -> tuple[bytes, Payload]:
    """A record as its twin with the bytes it refers to: ``S`` as ``C``, ``A`` as ``D``;
    any other as it is.

    Raises:
        KeyError: an ``S`` record of a conversation with no body record.
    """
    if kind == STORED:
        stored = txn.get(key, db=dbs.bodies)
        if stored is None:
            raise KeyError(f"{key!r} has no body record")
        messages = _stored_run(txn, dbs.messages, key, 0, payload.count)
        entries = _stored_run(txn, dbs.usage, key, 0, payload.usage_count or 0)
        return CHECKPOINT, Payload(
            bytes(stored), payload.count, messages, payload.usage_count, entries
        )
    if kind == APPENDED:
        writes = _stored_run(txn, dbs.messages, key, payload.start, payload.count)
        usage = _stored_run(txn, dbs.usage, key, payload.usage_start, payload.usage_count or 0)
        return DELTA, Payload(_SAME_BODY, payload.count, writes, payload.usage_count, usage)
    return kind, payload


def _stored_run(txn: Any, db: Any, key: bytes, start: int, end: int) -> Run:
    """The stored records ``start`` up to ``end`` of ``key`` in ``db``, with their indices
    (one cursor range; a missing one left out: its replay names the gap).

    Raises:
        ValueError: the run does not start at or before its end (a damaged record)."""
    if not 0 <= start <= end:
        raise ValueError(f"a version record's stored records run from {start} to {end}")
    prefix = message_prefix(key)
    size = len(prefix) + 8
    cursor = txn.cursor(db=db)
    found: Run = []
    if start < 1 << 64 and cursor.set_range(message_key(key, start)):
        for item, value in cursor:
            item = bytes(item)
            if not item.startswith(prefix):
                break
            if len(item) != size:  # a stray record under a longer key stands in for none
                continue
            index = int.from_bytes(item[len(prefix) :], "big")
            if index >= end:
                break
            found.append((index, bytes(value)))
    return found


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
    txn.put(version_key(key, version), encoded(CHECKPOINT, saved_at, payload), db=dbs.versions)


def _raw_records(txn: Any, db: Any, key: bytes) -> list[bytes]:
    """The stored message (or ledger) records of ``key`` in ``db``, in order."""
    return [data for _, data in _stored_run(txn, db, key, 0, 1 << 64)]


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
            found.append(Kept(version, moment(value), bytes(value[:1]) in CHECKPOINTS))
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
    for i, (kind, held) in enumerate(_chain_to(txn, dbs, key, version)):  # a checkpoint first
        _, payload = _resolved(txn, dbs, key, kind, held)
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


def _chain_to(txn: Any, dbs: Databases, key: bytes, version: int) -> list[tuple[bytes, Payload]]:
    """The records (kind, payload) from the newest checkpoint at or before ``version`` up to
    it, in order."""
    prefix = message_prefix(key)
    cursor = txn.cursor(db=dbs.versions)
    cursor.set_key(version_key(key, version))
    chain: list[tuple[bytes, Payload]] = []
    while True:
        item, value = bytes(cursor.key()), cursor.value()
        if not item.startswith(prefix):
            raise KeyError(f"version {version} of {key!r} has no checkpoint")
        kind = bytes(value[:1])
        chain.append((kind, _decoder.decode(value[9:])))
        if kind in CHECKPOINTS:
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
