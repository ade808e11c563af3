"""Settled messages: what a pass over a conversation's messages derived for each of them,
kept so that the next pass derives only for the messages that are new.

A kept value is valid while the list still starts with the very same messages and no
message has changed since it was derived. "Changed" is read from one process-wide stamp
(``_messages.last_change``) that every change to any message after its construction
moves, so checking costs one comparison of two lists by identity, at C speed, however long
the conversation. A change anywhere costs the next pass of every conversation one full
derivation, never a stale value; changes after construction are rare on a turn's path
(messages are built whole and then only read).
"""

from __future__ import annotations

from typing import Generic, TypeVar

from parlour.runtime._messages import Message

T = TypeVar("T")


class Settled(Generic[T]):
    """One derivation per message, kept for the next pass over the same conversation.

    Not thread-safe: it belongs to one conversation, reached by its owner only.
    """

    __slots__ = ("_messages", "_stamp", "gaps", "values")

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._stamp = -1
        self.values: list[T] = []  # one per kept message, in order
        self.gaps: list[int] = []  # the places whose value is a placeholder, ascending

    def settled(self, messages: list[Message], stamp: int) -> int:
        """How many leading ``messages`` the kept values still describe: all of them when
        ``messages`` starts with the very messages kept and ``stamp`` (``last_change()``,
        read before this pass derived anything) is the one they were kept at; else 0."""
        known = self._messages
        if stamp == self._stamp and messages[: len(known)] == known:
            return len(known)
        return 0

    def keep(
        self, messages: list[Message], values: list[T], stamp: int, gaps: list[int] | None = None
    ) -> None:
        """Keep ``values``, one per message of ``messages``, derived after ``stamp`` was
        read, and the places of ``gaps`` (a copy of ``messages`` is kept: the
        conversation's own list changes)."""
        self._messages, self.values, self._stamp = list(messages), values, stamp
        self.gaps = [] if gaps is None else gaps
