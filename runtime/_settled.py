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
from typing import Any, Generic, Self, SupportsIndex, TypeVar

from parlour.runtime._messages import Message, note_change

T = TypeVar("T")


class Messages(list[Message]):
    """A conversation's message list: a list whose every change but an append (``append``,
    ``extend``, ``+=``) moves the change stamp, so that a memo kept for its leading
    messages knows, by the stamp alone, that they are still the ones it was kept for.

    Reads and appends are the list's own, at C speed. Not thread-safe, as any list.
    """

    __slots__ = ()

    def __setitem__(self, index: Any, value: Any) -> None:
        super().__setitem__(index, value)
        note_change()

    def __delitem__(self, index: Any) -> None:
        super().__delitem__(index)
        note_change()

    def __imul__(self, n: SupportsIndex) -> Self:
        super().__imul__(n)
        note_change()
        return self

    def insert(self, index: SupportsIndex, message: Message) -> None:
        super().insert(index, message)
        note_change()

    def pop(self, index: SupportsIndex = -1) -> Message:
        message = super().pop(index)
        note_change()
        return message

    def remove(self, message: Message) -> None:
        super().remove(message)
        note_change()

    def clear(self) -> None:
        super().clear()
        note_change()

    def reverse(self) -> None:
        super().reverse()
        note_change()

    def sort(self, *args: Any, **kwargs: Any) -> None:
        super().sort(*args, **kwargs)
        note_change()


def as_messages(messages: Iterable[Message]) -> Messages:
    """``messages`` itself if it is a ``Messages`` list, else a ``Messages`` copy of it."""
    return messages if type(messages) is Messages else Messages(messages)


class Settled(Generic[T]):
    """One derivation per message, kept for the next pass over the same conversation.

    ``values`` is the keeper's own list: a pass over the same list may append to it.
    Not thread-safe: it belongs to one conversation, reached by its owner only.
    """

    __slots__ = ("_messages", "_stamp", "gaps", "values")

    def __init__(self) -> None:
        self._messages: list[Message] | None = None
        self._stamp = -1
        self.values: list[T] = []  # one per kept message, in order
        self.gaps: list[int] = []  # the places whose value is a placeholder, ascending

    def settled(self, messages: list[Message], stamp: int) -> int:
        """How many leading ``messages`` the kept values still describe: all of them when
        ``messages`` is the ``Messages`` list they were kept for and ``stamp``
        (``last_change()``, read before this pass derived anything) is the one they were
        kept at; else 0."""
        if stamp == self._stamp and messages is self._messages:
            return len(self.values)
        return 0

    def keep(
        self, messages: list[Message], values: list[T], stamp: int, gaps: list[int] | None = None
    ) -> None:
        """Keep ``values``, one per message of ``messages``, derived after ``stamp`` was
        read, and the places of ``gaps``. Nothing is kept for a plain list: its changes
        move no stamp."""
        self._messages = messages if type(messages) is Messages else None
        self.values, self._stamp = values, stamp
        self.gaps = [] if gaps is None else gaps
