"""Every way to change a list in place other than appending, named, for the tests that check
a memo kept for a message list (or a store's knowledge of a snapshot list) never outlives
such a change."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

Change = Callable[[list[Any], int, Any], object]


def _sort(messages: list[Any], at: int, new: Any) -> None:
    messages.sort(key=id, reverse=bool(at % 2))


def _imul(messages: list[Any], at: int, new: Any) -> None:
    messages *= 2 if at % 2 else 0  # one copy more, or nothing left


# each one leaves the list the same length or shorter, or one longer: no memo may survive
LIST_CHANGES: dict[str, Change] = {
    "set one": lambda ms, at, new: operator.setitem(ms, at % len(ms), new),
    "set a slice": lambda ms, at, new: operator.setitem(ms, slice(at % len(ms), None), [new]),
    "delete one": lambda ms, at, new: operator.delitem(ms, at % len(ms)),
    "delete a slice": lambda ms, at, new: operator.delitem(ms, slice(None, at % len(ms))),
    "insert": lambda ms, at, new: ms.insert(at % len(ms), new),
    "pop the last": lambda ms, at, new: ms.pop(),
    "pop one": lambda ms, at, new: ms.pop(at % len(ms)),
    "remove": lambda ms, at, new: ms.remove(ms[at % len(ms)]),
    "reverse": lambda ms, at, new: ms.reverse(),
    "sort": _sort,
    "clear": lambda ms, at, new: ms.clear(),
    "multiply": _imul,
}


def _add(messages: list[Any], at: int, new: Any) -> None:
    messages += [new]


# the appends: a memo of the leading items survives them, a copy that names its origin not
APPENDS: dict[str, Change] = {
    "append": lambda ms, at, new: ms.append(new),
    "extend": lambda ms, at, new: ms.extend([new]),
    "+=": _add,
}
EVERY_CHANGE: dict[str, Change] = {**LIST_CHANGES, **APPENDS}
