"""A conversation's kept token bound: what ``EncodingCounter.bound_messages`` summed over
its leading messages, so that the check before each model call looks only at what is new
instead of at the whole history."""

from __future__ import annotations

from collections.abc import Callable

from parlour.runtime._messages import Message, last_change
from parlour.runtime._settled import Messages

__all__ = ["BoundMemo"]

BoundOf = Callable[[Message, Callable[..., str]], int]  # EncodingCounter.bound_message


class BoundMemo:
    """What ``EncodingCounter.bound_messages`` summed over a conversation's leading
    messages. It holds while the conversation's list is the same ``Messages`` list, only
    appended to, and no message has changed since (both read from ``last_change``, see
    ``_settled.py``), and the same counter's memo is in force (its epoch); then the sum of
    those messages is reused, except for the ones whose bound depends on the render
    (``gaps``), which are bounded again. Anything else starts over. A kept sum is never
    below the exact count: each of its terms was at least its message's count, and the
    message has not changed since.

    Not thread-safe: it belongs to one conversation, reached by its owner only.
    """

    __slots__ = ("_epoch", "_fixed", "_gaps", "_length", "_messages", "_stamp")

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget the kept sum (an exact count tightened the messages' own memos)."""
        self._messages: list[Message] | None = None
        self._length = 0
        self._stamp = -1
        self._epoch: object = None
        self._fixed = 0
        self._gaps: list[int] = []

    def bound(
        self, messages: list[Message], epoch: object, bound_of: BoundOf, render: Callable[..., str]
    ) -> int:
        """The sum of ``bound_of(m, render)`` over ``messages``, each message memoized by
        the counter whose memo is ``epoch`` looked at once while this memo holds."""
        stamp = last_change()
        start, fixed, gaps = self._settled(messages, stamp, epoch)
        varying = 0
        for at in gaps:
            varying += bound_of(messages[at], render)
        for at in range(start, len(messages)):
            m = messages[at]
            kept = m._tokens
            if kept is None or kept[0] is not epoch:
                n = bound_of(m, render)
                kept = m._tokens
                if kept is None or kept[0] is not epoch:  # it needs the render: not kept
                    gaps.append(at)
                    varying += n
                    continue
            fixed += kept[1]
        if start != len(messages) and type(messages) is Messages:  # a plain list: no stamp
            self._messages, self._length, self._stamp = messages, len(messages), stamp
            self._epoch, self._fixed, self._gaps = epoch, fixed, gaps
        return fixed + varying

    def _settled(
        self, messages: list[Message], stamp: int, epoch: object
    ) -> tuple[int, int, list[int]]:
        """How many leading ``messages`` the kept sum covers, the sum, and the places among
        them to bound again (the kept list itself, appended to); none when nothing holds."""
        if stamp == self._stamp and epoch is self._epoch and messages is self._messages:
            return self._length, self._fixed, self._gaps
        return 0, 0, []
