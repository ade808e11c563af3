"""A conversation's kept token bound: what ``EncodingCounter.bound_messages`` summed over
its leading messages, so that the check before each model call looks only at what is new
instead of at the whole history."""

from __future__ import annotations

from collections.abc import Callable

from .._messages import Message, last_change
from .._settled import Messages

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

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget the kept sum (an exact count tightened the messages' own memos)."""
        # (the list, how many leading messages the sum covers, the stamp and the counter's
        # epoch it was made under, the sum, the places among them to bound again)
        self._kept: tuple[list[Message], int, int, object, int, list[int]] | None = None

    def bound(
        self, messages: list[Message], epoch: object, bound_of: BoundOf, render: Callable[..., str]
    ) -> int:
        """The sum of ``bound_of(m, render)`` over ``messages``, each message memoized by
        the counter whose memo is ``epoch`` looked at once while this memo holds."""
        stamp = last_change()
        kept = self._kept
        if kept is not None and kept[0] is messages and kept[2] == stamp and kept[3] is epoch:
            start, fixed, gaps = kept[1], kept[4], kept[5]  # the kept list, appended to
        else:
            start, fixed, gaps = 0, 0, []
        varying = 0
        for at in gaps:
            varying += bound_of(messages[at], render)
        for at in range(start, len(messages)):
            m = messages[at]
            memo = m._tokens
            if memo is None or memo[0] is not epoch:
                n = bound_of(m, render)
                memo = m._tokens
                if memo is None or memo[0] is not epoch:  # it needs the render: not kept
                    gaps.append(at)
                    varying += n
                    continue
            fixed += memo[1]
        if start != len(messages) and type(messages) is Messages:  # a plain list: no stamp
            self._kept = (messages, len(messages), stamp, epoch, fixed, gaps)
        return fixed + varying
