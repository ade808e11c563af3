"""Settled messages: what a pass over a conversation's messages derived for each of them,
kept so that the next pass derives only for the messages that are new.

A kept value is valid while the conversation's list is the very list it was kept for,
only appended to since, and no message has changed. Both are read from one process-wide
stamp (``_messages.last_change``): every change to any message after its construction
moves it, and so does every change to a ``Messages`` list other than an append. Checking
therefore costs two comparisons, however long the conversation, and keeps no copy of the
list. A change anywhere costs the next pass of every conversation one full derivation,
never a stale value; such changes are rare on a turn's path (messages are built whole,
then only appended and read; a compaction or an edit is the exception).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, Self, TypeVar

from ._lists import Noted
from ._messages import Message, note_change

T = TypeVar("T")


class Messages(Noted[Message]):
    """A conversation's message list: a list whose every change but an append moves the
    change stamp, so that a memo kept for its leading messages knows, by the stamp alone,
    that they are still the ones it was kept for. Not thread-safe, as any list."""

    __slots__ = ()

    def _rewritten(self) -> None:
        note_change()


class Copy(Noted[T]):
    """A copy of a ``Settled``'s kept values (or of a ``Ledger``) that carries their
    ``origin`` (a token the kept list has for as long as it is kept), for as long as the
    copy is not changed (any change, an append included, forgets it).

    A kept list is only ever appended to while it is kept, and left as it is after, so two
    unchanged copies with one origin hold the very same objects as far as the shorter
    goes: a store compares a save's message snapshots with its last save's by that
    (``stores._records.plan_records``) instead of item by item. ``copy()`` keeps the
    origin. The token holds nothing, so a store's copy keeps no kept list alive. Not
    thread-safe, as any list.
    """

    __slots__ = ("origin",)
    origin: object  # set by whoever makes one (no __init__ of its own: made thrice a turn)

    def _rewritten(self) -> None:
        self.origin = None

    def append(self, item: T) -> None:
        super().append(item)
        self.origin = None

    def extend(self, items: Iterable[T]) -> None:
        super().extend(items)
        self.origin = None

    def __iadd__(self, items: Iterable[T]) -> Self:  # type: ignore[override,misc]
        super().__iadd__(items)
        self.origin = None
        return self

    def copy(self) -> Copy[T]:
        copy = Copy(list.copy(self))  # from an exact list: copied at C speed
        copy.origin = getattr(self, "origin", None)
        return copy


class Ledger(Noted[T]):
    """A conversation's usage ledger (its entries in their plain form): a list that takes
    a new ``origin`` token at every change in place but an append, so two ``Copy``s of it
    made under one token (``copy_entries``) hold the very same entries as far as the
    shorter goes, and a save compares none of them (``stores._records.plan_records``).
    Not thread-safe, as any list."""

    __slots__ = ("origin",)

    def __init__(self, entries: Iterable[T] = ()) -> None:
        super().__init__(entries)
        self.origin = object()

    def _rewritten(self) -> None:
        self.origin = object()


def copy_entries(entries: list[T]) -> list[T]:
    """A snapshot's copy of a ledger: a ``Copy`` carrying a ``Ledger``'s origin, a plain
    list of any other list (an assigned one: compared entry by entry when saved)."""
    if not entries or type(entries) is not Ledger:  # an empty one shares nothing
        return list(entries)
    copy = Copy(list.copy(entries))  # from an exact list: copied at C speed
    copy.origin = entries.origin
    return copy


def as_messages(messages: Iterable[Message]) -> Messages:
    """``messages`` itself if it is a ``Messages`` list, else a ``Messages`` copy of it."""
    return messages if type(messages) is Messages else Messages(messages)


class Settled(Generic[T]):
    """One derivation per message, kept for the next pass over the same conversation.

    ``values`` is the keeper's own list: a pass over the same list may append to it, and
    nothing else changes it.
    Not thread-safe: it belongs to one conversation, reached by its owner only.
    """

    __slots__ = ("_messages", "_origin", "_stamp", "gaps", "values", "verified")

    def __init__(self) -> None:
        self._messages: list[Message] | None = None
        self._stamp = -1
        self.values: list[T] = []  # one per kept message, in order
        self._origin = object()  # the token of this very values list (see ``Copy``)
        self.gaps: list[int] = []  # the places whose value is a placeholder, ascending
        # how many leading values a check verified (``_pairing.check_rendered``); 0 again
        # whenever another list is kept, so it always speaks of this very list
        self.verified = 0

    def settled(self, messages: list[Message], stamp: int) -> int:
        """How many leading ``messages`` the kept values still describe: all of them when
        ``messages`` is the ``Messages`` list they were kept for and ``stamp``
        (``last_change()``, read before this pass derived anything) is the one they were
        kept at; else 0."""
        if stamp == self._stamp and messages is self._messages:
            return len(self.values)
        return 0

    def copy(self) -> Copy[T]:
        """A fresh list of the kept values, carrying their origin."""
        copy = Copy(self.values)
        copy.origin = self._origin
        return copy

    def keep(
        self, messages: list[Message], values: list[T], stamp: int, gaps: list[int] | None = None
    ) -> None:
        """Keep ``values``, one per message of ``messages``, derived after ``stamp`` was
        read, and the places of ``gaps``. Nothing is kept for a plain list: its changes
        move no stamp."""
        self._messages = messages if type(messages) is Messages else None
        if values is not self.values:  # another list: copies of the last one share nothing
            self.values, self._origin, self.verified = values, object(), 0
        self._stamp = stamp
        self.gaps = [] if gaps is None else gaps
