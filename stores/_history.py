"""LmdbStore's version history: every save kept as what it wrote, with periodic checkpoints.

A version record (``versions``: id + NUL + 8-byte version -> record) is a kind byte
(``C`` checkpoint, ``D`` delta), the save's time (8 bytes, microseconds since the epoch)
and a msgpack ``Payload``: the body, the message count, and the messages written (index,
bytes): every message for a checkpoint, the changed ones for a delta. Reading version N
starts at the newest checkpoint at or before N and replays the deltas after it.

The chain (deltas since the checkpoint, their bytes, the checkpoint's bytes), kept in the
conversation's header as its version left it, decides when a save is a checkpoint: when its
delta would make the chain longer than ``MAX_CHAIN`` records or its messages heavier than
the checkpoint's, or when the previous version was not recorded with a chain. (Stores
written before kept it in ``chains``, id -> four 8-byte integers; the code reads it no
more, and drops it with the history.) So a read replays at most ``MAX_CHAIN`` deltas and
about twice a full copy's message bytes (a read uses only the last record's body), and a
conversation's history costs about what its saves wrote plus a few full copies.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from parlour.stores._records import Chain, MessagePlan, message_prefix

if TYPE_CHECKING:
    from parlour.stores._layout import Databases

MAX_CHAIN = 256  # most deltas after a checkpoint
PRUNE_EVERY = 64  # a save whose version is a multiple of this prunes its conversation
CHECKPOINT, DELTA = b"C", b"D"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


class Payload(msgspec.Struct, array_like=True):
    """What one version record holds after its kind and time."""

    body: bytes
    count: int
    writes: list[tuple[int, bytes]]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Payload)


class Kept(NamedTuple):
    """One recorded version: its number, when it was saved, whether it is a checkpoint."""

    version: int
    saved_at: dt.datetime
    checkpoint: bool


class Retention(NamedTuple):
    """Which versions to keep: the newest ``keep`` (None: all) and those younger than
    ``keep_for`` (None: any age). The current version always stays."""

    keep: int | None
    keep_for: dt.timedelta | None
    now: Callable[[], dt.datetime]


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
    body: bytes,
    plan: MessagePlan,
    chain: Chain | None,
) -> Chain:
    """Record the save that wrote ``body`` and ``plan`` as ``version``: a delta of what it
    wrote, or a checkpoint of every message when the chain calls for one. ``chain`` is what
    the previous version left (None: it was not recorded with one). Returns the chain this
    version leaves, for its header."""
    size = plan.size
    full = len(plan.writes) == len(plan.messages)
    if chain is None or full or chain[0] >= MAX_CHAIN or chain[1] + size > chain[2]:
        # the messages as this save left them: the stored bytes, none encoded again
        count = len(plan.messages)
        writes = plan.writes if full else list(enumerate(_raw_messages(txn, dbs, key, count)))
        payload = Payload(body, count, writes)
        txn.put(version_key(key, version), _record(CHECKPOINT, saved_at, payload), db=dbs.versions)
        return (0, 0, sum(len(data) for _, data in writes))
    payload = Payload(body, len(plan.messages), plan.writes)
    txn.put(version_key(key, version), _record(DELTA, saved_at, payload), db=dbs.versions)
    return (chain[0] + 1, chain[1] + size, chain[2])


def seed(txn: Any, dbs: Databases, key: bytes, version: int, saved_at: dt.datetime) -> None:
    """Record the stored state of ``key`` as a checkpoint of ``version`` (the upgrade of a
    store written before history: its current versions become the first recorded)."""
    body = txn.get(key, db=dbs.bodies)
    if body is None:
        return
    messages = _raw_messages(txn, dbs, key)
    payload = Payload(bytes(body), len(messages), list(enumerate(messages)))
    txn.put(version_key(key, version), _record(CHECKPOINT, saved_at, payload), db=dbs.versions)


def _raw_messages(txn: Any, dbs: Databases, key: bytes, limit: int | None = None) -> list[bytes]:
    """The stored message records of ``key`` (at most ``limit``), in order."""
    prefix = message_prefix(key)
    cursor = txn.cursor(db=dbs.messages)
    found: list[bytes] = []
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


def state(txn: Any, dbs: Databases, key: bytes, version: int) -> tuple[bytes, list[bytes]] | None:
    """The body and messages of ``version`` exactly as that save left them, replayed from
    the newest checkpoint at or before it; None when it is not recorded."""
    if txn.get(version_key(key, version), db=dbs.versions) is None:
        return None
    chain = _chain_to(txn, dbs, key, version)
    body, messages = b"", list[bytes]()
    for payload in chain:
        body = payload.body
        del messages[payload.count :]
        messages.extend(b"" for _ in range(payload.count - len(messages)))
        for index, data in payload.writes:
            messages[index] = data
    return body, messages


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
    if retention.keep_for is None:  # by count alone: only the keys are read
        numbers = _numbers(txn, dbs, key)
        if retention.keep is None or len(numbers) <= retention.keep:
            return 0
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


def _materialize(txn: Any, dbs: Databases, key: bytes, item: Kept) -> None:
    held = state(txn, dbs, key, item.version)
    assert held is not None  # listed by kept() in this transaction
    body, messages = held
    payload = Payload(body, len(messages), list(enumerate(messages)))
    txn.put(
        version_key(key, item.version),
        _record(CHECKPOINT, item.saved_at, payload),
        db=dbs.versions,
    )
