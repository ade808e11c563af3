"""``Noted``: a list that hears its own changes in place, the base of the lists whose
changes must reach a memo (a message's blocks, a conversation's messages and usage ledger,
a copy of kept snapshots)."""

from __future__ import annotations

from typing import Any, Self, SupportsIndex, TypeVar

T = TypeVar("T")


class Noted(list[T]):
    """A list that calls ``_rewritten`` after every change in place but an append
    (``append``, ``extend`` and ``+=`` are the list's own, at C speed, unless a subclass
    hears them too)."""

    __slots__ = ()

    def _rewritten(self) -> None:
        raise NotImplementedError

    def __setitem__(self, index: Any, value: Any) -> None:
        super().__setitem__(index, value)
        self._rewritten()

    def __delitem__(self, index: Any) -> None:
        super().__delitem__(index)
        self._rewritten()

    def __imul__(self, n: SupportsIndex) -> Self:
        super().__imul__(n)
        self._rewritten()
        return self

    def insert(self, index: SupportsIndex, item: T) -> None:
        super().insert(index, item)
        self._rewritten()

    def pop(self, index: SupportsIndex = -1) -> T:
        item = super().pop(index)
        self._rewritten()
        return item

    def remove(self, item: T) -> None:
        super().remove(item)
        self._rewritten()

    def clear(self) -> None:
        super().clear()
        self._rewritten()

    def reverse(self) -> None:
        super().reverse()
        self._rewritten()

    def sort(self, *args: Any, **kwargs: Any) -> None:
        super().sort(*args, **kwargs)
        self._rewritten()
