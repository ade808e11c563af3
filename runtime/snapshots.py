"""Persistence snapshots: a conversation as plain msgspec data, with a format version, and
its codec.

The stored forms live beside what they store (``ConversationPersistenceSnapshot`` and
``FORMAT_VERSION`` with the conversation in ``_context.py``, ``MessageSnapshot`` in
``_message_snapshot.py``); this public module gathers them and encodes and decodes them.
Evolve by msgspec's rules: new fields get defaults; never reorder or retype a stored field.
``FORMAT_VERSION`` names the newest format this code writes; decoding a newer one is refused.
Decoding never depends on the caller's stack depth, and a stored value nested deeper than
``MAX_NESTING`` is a ``CorruptSnapshotError`` (parlour never writes one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import msgspec

from ._appended import Appended
from ._context import FORMAT_VERSION, ConversationPersistenceSnapshot
from ._message_snapshot import MessageSnapshot, message_snapshots, repaired_messages
from ._objective import ObjectiveSlot
from ._open_turn import OpenTurn
from ._validation import MAX_NESTING, nesting_depth
from .blocks import ContentBlock, PojoBlock
from .errors import CorruptSnapshotError

__all__ = [
    "FORMAT_VERSION",
    "Appended",
    "ConversationPersistenceSnapshot",
    "MessageSnapshot",
    "ObjectiveSlot",
    "OpenTurn",
    "applied",
    "decode_message_snapshot",
    "decode_snapshot",
    "decode_usage_entry",
    "encode_snapshot",
    "message_snapshots",
    "repaired_messages",
]

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ConversationPersistenceSnapshot)
_message_decoder = msgspec.json.Decoder(MessageSnapshot)
_usage_decoder = msgspec.json.Decoder(dict[str, Any])
_T = TypeVar("_T")


def encode_snapshot(snapshot: ConversationPersistenceSnapshot) -> bytes:
    return _encoder.encode(snapshot)


def decode_snapshot(
    data: bytes | memoryview, conversation_id: str
) -> ConversationPersistenceSnapshot:
    """Decode a stored snapshot; the answer never depends on the caller's stack depth.

    Raises:
        CorruptSnapshotError: the bytes do not decode, were written by a newer format, or a
            value in them nests deeper than ``MAX_NESTING``; the message names the
            conversation.
    """
    snapshot = _decode(_decoder, data, conversation_id)
    if snapshot.version > FORMAT_VERSION:
        raise CorruptSnapshotError(
            f"Stored conversation {conversation_id} has format version {snapshot.version}; "
            f"this parlour reads up to {FORMAT_VERSION}. Upgrade parlour."
        )
    _check_nesting(conversation_id, _free_values(snapshot))
    return snapshot


def decode_message_snapshot(data: bytes | memoryview, conversation_id: str) -> MessageSnapshot:
    """Decode one stored message, with ``decode_snapshot``'s guarantees.

    Raises:
        CorruptSnapshotError: as ``decode_snapshot``.
    """
    message = _decode(_message_decoder, data, conversation_id)
    _check_nesting(conversation_id, _pojo_values(message.blocks))
    return message


def decode_usage_entry(data: bytes | memoryview, conversation_id: str) -> dict[str, Any]:
    """Decode one stored usage ledger entry (a plain dict) with ``decode_snapshot``'s
    guarantees; raises ``CorruptSnapshotError`` as it does."""
    entry = _decode(_usage_decoder, data, conversation_id)
    _check_nesting(conversation_id, [("a usage ledger entry", entry)])
    return entry


def _decode(
    decoder: msgspec.json.Decoder[_T], data: bytes | memoryview, conversation_id: str
) -> _T:
    """``decoder.decode(data)``; a RecursionError (a deep caller stack, or a record nested
    past what any stack holds) is decided again on a fresh thread, so every caller gets
    the same answer for the same bytes."""
    try:
        try:
            return decoder.decode(data)
        except RecursionError:
            return _on_fresh_stack(decoder.decode, data)
    except msgspec.DecodeError as exc:
        raise CorruptSnapshotError(
            f"Stored conversation {conversation_id} does not decode: {exc}"
        ) from exc
    except RecursionError:
        raise CorruptSnapshotError(
            f"Stored conversation {conversation_id} nests deeper than parlour reads "
            f"(values may nest {MAX_NESTING} levels)."
        ) from None


def _on_fresh_stack(decode: Callable[[bytes | memoryview], _T], data: bytes | memoryview) -> _T:
    """``decode(data)`` on a new thread (an empty stack), its result or exception here."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, decode(data)))
        except BaseException as exc:  # handed back to the caller's thread below
            outcome.append((False, exc))

    worker = threading.Thread(target=run, name="parlour-decode", daemon=True)
    worker.start()
    worker.join()
    ok, result = outcome[0]
    if not ok:
        raise result
    return result  # type: ignore[no-any-return]


def _check_nesting(conversation_id: str, values: Iterable[tuple[str, object]]) -> None:
    for where, value in values:
        if nesting_depth(value) > MAX_NESTING:
            raise CorruptSnapshotError(
                f"Stored conversation {conversation_id} holds a value ({where}) nested deeper "
                f"than {MAX_NESTING} levels; parlour never writes one."
            )


def _free_values(snapshot: ConversationPersistenceSnapshot) -> Iterator[tuple[str, object]]:
    """Every free-form value a snapshot holds, named: PojoBlock values and artifacts."""
    for slot in snapshot.objective:
        yield from _pojo_values([slot.block], f"objective slot {slot.key!r}")
    yield from _pojo_values(snapshot.legacy_objective or (), "the legacy objective")
    for i, m in enumerate(snapshot.messages):
        yield from _pojo_values(m.blocks, f"message {i}")
    for i, artifact in enumerate(snapshot.artifacts):
        yield f"artifact {i}", artifact


def _pojo_values(
    blocks: Iterable[ContentBlock], where: str = "a message"
) -> Iterator[tuple[str, object]]:
    for i, block in enumerate(blocks):
        if isinstance(block, PojoBlock):
            yield f"{where} block {i}", block.value


def applied(
    snapshot: ConversationPersistenceSnapshot, appended: Appended, version: int
) -> ConversationPersistenceSnapshot | None:
    """``snapshot`` (of ``appended.version``) with ``appended`` applied, as ``version``: the
    snapshot a whole save would have stored; None when ``snapshot`` is of another version."""
    if snapshot.stored_version != appended.version:
        return None
    return msgspec.structs.replace(
        snapshot,
        messages=snapshot.messages[: appended.start] + appended.messages,
        usage=snapshot.usage[: appended.usage_start] + appended.usage,
        turn=appended.turn,
        stored_version=version,
    )
