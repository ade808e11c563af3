"""What PostgresStore needs around its statements: the row codec, the id checks, and its
memory of what it last wrote or read of each conversation (``Remembered``)."""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, TypeVar

from parlour.runtime.snapshots import ConversationPersistenceSnapshot, MessageSnapshot

from .. import _checked
from .._body import Body
from .._ids import conversation_key, user_key
from .._records import decode_record, shares_prefix

__all__ = [
    "Remembered",
    "checked",
    "decode_row",
    "encode_messages",
    "encode_usage",
]


def encode_messages(cid: str, messages: list[MessageSnapshot], start: int) -> list[bytes]:
    """Messages ``start`` on of ``cid``, encoded; ValueError when one would not read back."""
    return [data for _, data in _checked.encode_messages(cid, messages, start, len(messages))]


def encode_usage(cid: str, entries: list[dict[str, Any]], start: int) -> list[bytes]:
    """Ledger entries ``start`` on of ``cid``, encoded; ValueError as ``encode_messages``."""
    return [data for _, data in _checked.encode_usage(cid, entries, start, len(entries))]


def decode_row(
    cid: str,
    owner: str,
    version: int,
    body: bytes,
    messages: list[bytes],
    count: int,
    usage: tuple[int, list[bytes]] | None,
) -> ConversationPersistenceSnapshot:
    """A stored version reassembled, its identity checked against its row. ``usage``: the
    ledger's count and entries (None: the body holds the ledger, as saved before layout 2).

    Raises:
        CorruptSnapshotError: it does not decode, misses messages or ledger entries, or
            names another conversation or owner.
    """
    snapshot = decode_record(cid, owner, count, body, messages, usage)
    snapshot.stored_version = version
    return snapshot


T = TypeVar("T")


def _copied(items: Sequence[T]) -> list[T]:
    """A copy of ``items`` (``copy()`` of a list: a ``Copy`` keeps its origin)."""
    return items.copy() if isinstance(items, list) else list(items)


class Remembered:
    """What a store last wrote or read of each conversation, at which version (an LRU of
    ``size`` conversations): its messages, and its ledger entries when they are rows (None:
    that version's body held the ledger, so the next save writes every entry). A version
    number names one state (fencing makes its writer unique and versions never restart),
    so the memory can only be stale in being absent.

    Thread-safety: every method from any thread (one short lock).
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._known: OrderedDict[
            str, tuple[int, list[MessageSnapshot], list[dict[str, Any]] | None, Body | None]
        ] = OrderedDict()
        self._lock = threading.Lock()

    def unchanged(self, cid: str, snapshot: ConversationPersistenceSnapshot) -> tuple[int, int]:
        """How many leading messages and ledger entries the stored version already holds,
        as far as this store knows."""
        with self._lock:
            known = self._known.get(cid)
        if known is None or known[0] != snapshot.stored_version:
            return 0, 0
        usage = 0 if known[2] is None else _common(known[2], snapshot.usage)
        return _common(known[1], snapshot.messages), usage

    def body(self, cid: str) -> Body | None:
        """The body this store last wrote of ``cid`` (any version: a ``Body`` is only ever
        reused for a body that encodes to its bytes)."""
        with self._lock:
            known = self._known.get(cid)
        return None if known is None else known[3]

    def remember(
        self,
        cid: str,
        version: int,
        messages: Sequence[MessageSnapshot],
        usage: Sequence[dict[str, Any]] | None,
        body: Body | None = None,
    ) -> None:
        with self._lock:
            known = self._known.get(cid)
            if known is not None and known[0] > version:
                return  # a newer state is already remembered
            kept = _copied(messages)
            entries = None if usage is None else _copied(usage)
            if body is None and known is not None:
                body = known[3]  # a load: the body last written still pairs with its bytes
            self._known[cid] = (version, kept, entries, body)
            self._known.move_to_end(cid)
            while len(self._known) > self._size:
                self._known.popitem(last=False)

    def forget(self, cid: str) -> None:
        with self._lock:
            self._known.pop(cid, None)


def _common(base: list[Any], items: list[Any]) -> int:
    """How many leading items are the base's very objects."""
    common = min(len(base), len(items))
    if shares_prefix(base, items) or all(map(operator.is_, base[:common], items[:common])):
        return common
    return list(map(operator.is_, base, items)).index(False)


def checked(conversation_id: str, user_id: str) -> str:
    """The conversation id, once it and the user id pass every store's id rules.

    Raises:
        ValueError: either id is empty, holds a NUL or a lone surrogate, or is too long.
    """
    conversation_key(conversation_id)
    user_key(user_id)
    return conversation_id
