"""How LmdbStore lays a conversation out: a small header, a body, one record per message
and one per usage ledger entry.

A save rewrites the header and the body (the snapshot without its messages and its ledger)
and writes only the messages and ledger entries whose bytes changed since the store last
wrote this conversation, so its cost does not grow with the conversation's length.
"""

from __future__ import annotations

import datetime as dt
import operator
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Generic, NamedTuple, TypeVar

import msgspec

from parlour.runtime.blocks import PojoBlock
from parlour.runtime.errors import CorruptSnapshotError
from parlour.runtime.snapshots import (
    ConversationPersistenceSnapshot,
    MessageSnapshot,
    OpenTurn,
    decode_message_snapshot,
    decode_snapshot,
    decode_usage_entry,
    encode_snapshot,
)

from ._checked import Run, encode_messages, encode_usage
from ._packed import unpacked_body

T = TypeVar("T")

_MOST = (1 << 63) - 1  # a count or version past it is damage (keys hold 8 bytes; SQL a bigint)
Count = Annotated[int, msgspec.Meta(ge=0, le=_MOST)]
Chain = tuple[int, int, int]  # deltas since the last checkpoint, their bytes, the checkpoint's
# (conversation, items, start, stop) -> (index, bytes) of each, as ``_checked``'s
Encode = Callable[[str, Sequence[T], int, int], Run]


class Header(msgspec.Struct, frozen=True, kw_only=True):
    """The per-conversation record read on every write: owner, title, times, message count,
    the fencing version advanced by every save, the version history's chain as that
    version left it (None: that version was not recorded with one, so the next is a
    checkpoint; a parlour that predates the field ignores it and drops it on rewrite), and
    the usage ledger's entry count, and the open-turn record the save carried (kept here,
    not in the body, so a boundary that moves only the turn's step rewrites no body)."""

    user_id: Annotated[str, msgspec.Meta(min_length=1)]
    title: str
    created_at: dt.datetime
    updated_at: dt.datetime
    message_count: Count = 0
    version: Annotated[int, msgspec.Meta(ge=1, le=_MOST)] = 1
    history: Chain | None = None
    usage_count: Count = 0
    turn: OpenTurn | None = None


class LegacyHeader(msgspec.Struct, frozen=True, kw_only=True):
    """A header as layout 1 wrote it: no version, or a version that may be 0."""

    user_id: Annotated[str, msgspec.Meta(min_length=1)]
    title: str
    created_at: dt.datetime
    updated_at: dt.datetime
    message_count: Count = 0
    version: Annotated[int, msgspec.Meta(ge=0, le=_MOST)] = 0


header_encoder = msgspec.json.Encoder()
header_decoder = msgspec.json.Decoder(Header)
legacy_header_decoder = msgspec.json.Decoder(LegacyHeader)
_plain_encoder = msgspec.json.Encoder()
_message_decoder = msgspec.json.Decoder(MessageSnapshot)
usage_encoder = msgspec.json.Encoder()
_usage_decoder = msgspec.json.Decoder(dict[str, Any])


def decode_header(conversation_id: str, raw: bytes | memoryview) -> Header:
    """The header of ``conversation_id``.

    Raises:
        CorruptSnapshotError: the bytes are not a valid header.
    """
    try:
        return header_decoder.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise CorruptSnapshotError(
            f"The header of stored conversation {conversation_id} is damaged: {_reason(exc)}"
        ) from exc


_turn_encoder = msgspec.json.Encoder()
_turn_decoder = msgspec.json.Decoder(OpenTurn)


def encode_turn(turn: OpenTurn | None) -> bytes | None:
    """An open-turn record's stored bytes (None: no record)."""
    return None if turn is None else _turn_encoder.encode(turn)


def decode_turn(conversation_id: str, raw: bytes | memoryview | None) -> OpenTurn | None:
    """The open-turn record stored as ``raw`` (None: none stored).

    Raises:
        CorruptSnapshotError: the bytes are not a valid record.
    """
    if raw is None:
        return None
    try:
        return _turn_decoder.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise CorruptSnapshotError(
            f"The open-turn record of stored conversation {conversation_id} is damaged: "
            f"{_reason(exc)}"
        ) from exc


def _reason(exc: BaseException) -> str:
    return "nested too deeply" if isinstance(exc, RecursionError) else str(exc)


def message_key(key: bytes, index: int) -> bytes:
    """Message (or ledger entry) ``index`` of conversation ``key``: sorts in order under the
    conversation."""
    return key + b"\x00" + index.to_bytes(8, "big")


def message_prefix(key: bytes) -> bytes:
    return key + b"\x00"


def encode_body(snapshot: ConversationPersistenceSnapshot) -> bytes:
    """The snapshot without its messages and its usage ledger (they are stored one record
    each), without its ``stored_version`` (every read stamps the record's own) and its
    open-turn record (each store keeps it with the save's header), so that
    a save that changed nothing else writes the body it already has: the same bytes, which
    a store may skip."""
    return encode_snapshot(
        msgspec.structs.replace(snapshot, messages=[], usage=[], stored_version=0, turn=None)
    )


def decode_record(
    conversation_id: str,
    owner: str,
    count: int,
    body: bytes | memoryview,
    messages: Sequence[bytes | memoryview],
    usage: tuple[int, Sequence[bytes | memoryview]] | None = None,
) -> ConversationPersistenceSnapshot:
    """Reassemble a snapshot from its body, message and ledger records, checking that the
    body names the conversation and owner its key and header (or row) do, and that all
    ``count`` messages are there. ``usage`` is the ledger's expected count and its records
    (None: the ledger is the body's own, as layouts before 4 stored it). Every store reads
    through this one function.

    Raises:
        CorruptSnapshotError: a record does not decode, messages or ledger entries are
            missing, or the body's identity disagrees with the key or the header.
    """
    body = unpacked_body(body, conversation_id)  # LmdbStore packs a large one (``_packed``)
    snapshot = decode_snapshot(body, conversation_id)  # a too-deep body: CorruptSnapshotError
    if snapshot.conversation_id != conversation_id or snapshot.user_id not in (None, owner):
        raise CorruptSnapshotError(
            f"Stored conversation {conversation_id} is damaged: its body names another "
            "conversation or user than its key and header."
        )
    if len(messages) != count:
        raise CorruptSnapshotError(
            f"Stored conversation {conversation_id} has {len(messages)} of its {count} messages."
        )
    snapshot.messages = _decode_messages(conversation_id, messages)
    if usage is not None:
        snapshot.usage = _decode_usage(conversation_id, *usage)
    return snapshot


def _decode_usage(
    conversation_id: str, count: int, entries: Sequence[bytes | memoryview]
) -> list[dict[str, Any]]:
    """Every ledger entry decoded, as ``decode_usage_entry`` decodes it: the plain decoder
    first; when any record does not decode, or an entry holds a container (which must pass
    the nesting check), all go through ``decode_usage_entry``.

    Raises:
        CorruptSnapshotError: entries are missing, or one does not decode or nests too
            deeply.
    """
    if len(entries) != count:
        raise CorruptSnapshotError(
            f"Stored conversation {conversation_id} has {len(entries)} of its {count} usage "
            "ledger entries."
        )
    decode = _usage_decoder.decode
    try:
        decoded = [decode(e) for e in entries]
    except (msgspec.DecodeError, RecursionError):
        decoded = None
    if decoded is None or any(isinstance(v, (dict, list)) for e in decoded for v in e.values()):
        return [decode_usage_entry(e, conversation_id) for e in entries]
    return decoded


def _decode_messages(
    conversation_id: str, messages: Sequence[bytes | memoryview]
) -> list[MessageSnapshot]:
    """Every message decoded, as ``decode_message_snapshot`` decodes it, at half its cost:
    the plain decoder first; when any record does not decode, or a message holds a
    ``PojoBlock`` (whose value must pass the nesting check), all go through
    ``decode_message_snapshot``, which raises exactly what it raises.

    Raises:
        CorruptSnapshotError: a record does not decode or nests too deeply.
    """
    decode = _message_decoder.decode
    try:
        decoded = [decode(m) for m in messages]
    except (msgspec.DecodeError, RecursionError):
        decoded = None
    if decoded is None or any(isinstance(b, PojoBlock) for m in decoded for b in m.blocks):
        return [decode_message_snapshot(m, conversation_id) for m in messages]
    return decoded


class Plan(NamedTuple, Generic[T]):
    """Which records (messages or ledger entries) a save writes, already encoded: ``writes``
    holds (index, bytes) for every item whose stored bytes would change, ``size`` their
    total length.

    ``base`` is what the store believed was written when the plan was made; a plan whose
    base is no longer current is made again under the commit lock.
    """

    base: list[T] | None
    writes: list[tuple[int, bytes]]
    items: list[T]
    size: int


MessagePlan = Plan[MessageSnapshot]
UsagePlan = Plan[dict[str, Any]]


def plan_messages(
    base: list[MessageSnapshot] | None, messages: list[MessageSnapshot], cid: str
) -> MessagePlan:
    """Plan to write every message of ``cid`` whose encoded bytes differ from what the store
    last wrote (all of them without a ``base``): ``plan_records`` with the checked message
    encoder.

    Raises:
        ValueError: a message it encodes would not read back (``_checked``).
    """
    return plan_records(base, messages, encode_messages, cid)


def plan_usage(
    base: list[dict[str, Any]] | None, usage: list[dict[str, Any]], cid: str
) -> UsagePlan:
    """Plan to write every ledger entry of ``cid`` whose encoded bytes differ from what the
    store last wrote: the usual save appends one or two entries and writes only those. A
    ledger entry is recognized by identity, as a message snapshot is: an entry changes by
    being replaced (a new dict), never in place.

    Raises:
        ValueError: an entry it encodes would not read back (``_checked``).
    """
    if base is not None and len(base) == len(usage):
        if not base:  # the service turn: no ledger at all
            return Plan(base, [], [], 0)  # never the caller's list: it may grow after the save
        if shares_prefix(base, usage):  # unchanged since the store wrote it (a turn's first
            return Plan(base, [], base, 0)  # save): the very objects it wrote, no copy
    return plan_records(base, usage, encode_usage, cid)


def plan_records(base: list[T] | None, items: list[T], encode: Encode[T], cid: str) -> Plan[T]:
    """Plan to write every item of ``cid`` whose encoded bytes differ from what the store
    last wrote (all of them without a ``base``); ``encode(cid, items, start, stop)`` encodes
    a run of them, refusing what would not read back.

    Memoized message snapshots (and ledger entries, appended and never changed) make
    unchanged items the very same objects. Two unchanged copies of one conversation's kept
    snapshots (``message_snapshots`` gives such a list: its ``origin`` says which) share
    them as far as the shorter goes, and nothing is compared; else one pass of identity
    checks (``map(operator.is_, ...)``, about 20 ns an item) finds the first that is not;
    from there on, an item the store wrote is compared by its encoded bytes, never by
    ``==`` (which takes ``1`` for ``True``, ``0.0`` for ``-0.0``), so a changed item is
    always written. A list shorter than the base writes nothing for the missing tail: the
    store removes it by the counts. The plan holds a copy of ``items`` (``copy()``, which
    keeps an origin): the caller's list may change after the save (a snapshot edited and
    saved again), the next base may not.
    """
    items = items.copy() if isinstance(items, list) else list(items)
    if base is None:
        writes = encode(cid, items, 0, len(items))
    else:
        common = min(len(base), len(items))
        # the usual turn: nothing before the end changed
        same = shares_prefix(base, items) or all(map(operator.is_, base, items))
        writes = [] if same else _changed(base, items, common, encode, cid)
        if len(items) > common:
            writes += encode(cid, items, common, len(items))
    return Plan(base, writes, items, sum(len(data) for _, data in writes) if writes else 0)


def shares_prefix(base: list[Any], items: list[Any]) -> bool:
    """Whether ``base`` and ``items`` are unchanged copies of one kept list (the very
    same objects as far as the shorter goes), by their ``origin`` (see
    ``runtime._settled.Copy``)."""
    origin = getattr(items, "origin", None)
    return origin is not None and getattr(base, "origin", None) is origin


def _changed(
    base: list[T], items: list[T], common: int, encode: Encode[T], cid: str
) -> list[tuple[int, bytes]]:
    """The items among the first ``common`` that are not the base's very objects and whose
    encoded bytes differ from the base's."""
    start = operator.indexOf(map(operator.is_, base, items), False)
    writes = []
    for index in range(start, common):
        item = items[index]
        if base[index] is not item:
            data = encode(cid, items, index, index + 1)[0][1]
            if data != _written(base[index]):
                writes.append((index, data))
    return writes


def _written(item: object) -> bytes | None:
    """The bytes an item the store wrote encodes to now (None: it no longer encodes, having
    changed in place since: never the bytes of what replaces it)."""
    try:
        return _plain_encoder.encode(item)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return None


def advanced(
    old: Header, now: dt.datetime, message_count: int, usage_count: int, turn: OpenTurn | None
) -> Header:
    """The header of the save after ``old``: the next version, the new counts, time and
    open-turn record."""
    return msgspec.structs.replace(
        old,
        updated_at=now,
        message_count=message_count,
        version=old.version + 1,
        usage_count=usage_count,
        turn=turn,
    )


def replanned(
    cid: str,
    messages: list[MessageSnapshot] | None,
    usage: list[dict[str, Any]] | None,
    plan: MessagePlan,
    ledger: UsagePlan,
) -> tuple[MessagePlan, UsagePlan]:
    """The plans made again when another write of the conversation landed since they were
    made: their bases are not ``messages`` and ``usage``, what the store now knows it wrote
    of ``cid`` (None: nothing)."""
    if plan.base is not messages:
        plan = plan_messages(messages, plan.items, cid)
    if ledger.base is not usage:
        ledger = plan_usage(usage, ledger.items, cid)
    return plan, ledger


def write_run(txn: Any, db: Any, key: bytes, plan: MessagePlan | UsagePlan, old: int) -> None:
    """Put the plan's writes into ``db`` (messages or ledger entries) and delete the records
    past its new end, up to ``old``, the count the record had."""
    for index, data in plan.writes:
        txn.put(message_key(key, index), data, db=db)
    for index in range(len(plan.items), old):
        txn.delete(message_key(key, index), db=db)
