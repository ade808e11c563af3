"""A message's block list: every block that enters it is validated, and every change in
place reaches the message that holds it (``_messages.Message``, through the ``Owner``
protocol: this module imports nothing of the message's)."""

from __future__ import annotations

import operator
import weakref
from collections.abc import Iterable
from typing import Any, Protocol, Self, SupportsIndex

from ._lists import Noted
from .blocks import ContentBlock, check_block, plainly_storable

__all__ = ["Owner", "StoredBlocks"]


class Owner(Protocol):
    """What a block list needs of the message holding it: the role its refusals name, and
    ``_forget``, which drops what was derived from the message and moves the change stamp."""

    @property
    def role(self) -> str: ...
    def _forget(self) -> None: ...


class StoredBlocks(list[ContentBlock]):
    """Blocks decoded from a stored record: the decoder already proved them storable (typed
    fields, no lone surrogate, values within the nesting cap), so a message given them
    skips the check. Only the snapshot code makes one."""

    __slots__ = ()


class _Blocks(Noted[ContentBlock]):
    """A message's block list: every block that enters it is validated, and any change in
    place forgets the message's memoized snapshot.

    Reads (iteration, indexing, ``len``) are the list's own, at C speed.

    Raises:
        ValueError: (on construction and on every insertion) a block that could not be
            stored (see ``blocks.check_block``); the list is left as it was.
    """

    __slots__ = ("_owner",)
    _owner: weakref.ref[Owner]

    def __init__(self, owner: Owner, blocks: Iterable[ContentBlock]) -> None:
        super().__init__(blocks)
        self._owner = weakref.ref(owner)  # no cycle: a message is freed by refcount
        if type(blocks) is not StoredBlocks:
            self._check(self, 0)  # a stored record's blocks are checked by the decoder

    def _check(self, blocks: Iterable[object], start: int) -> None:
        for i, block in enumerate(blocks, start):
            if not plainly_storable(block):  # the common case builds no message text
                owner = self._owner()
                where = (
                    "a message"
                    if owner is None
                    else f"{type(owner).__name__} (role {owner.role!r})"
                )
                check_block(block, f"{where} block {i}")

    def __reduce__(self) -> tuple[Any, ...]:
        # a plain list: the unpickled message wraps (and checks) it again on assignment
        return (list, (list(self),))

    def _rewritten(self) -> None:
        owner = self._owner()
        if owner is not None:
            owner._forget()

    def append(self, block: ContentBlock) -> None:
        self._check((block,), len(self))
        super().append(block)
        self._rewritten()

    def extend(self, blocks: Iterable[ContentBlock]) -> None:
        blocks = list(blocks)
        self._check(blocks, len(self))
        super().extend(blocks)
        self._rewritten()

    def insert(self, index: SupportsIndex, block: ContentBlock) -> None:
        self._check((block,), operator.index(index))
        super().insert(index, block)  # and forgets

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, slice):
            value = list(value)
            self._check(value, 0)
        else:
            self._check((value,), index)
        super().__setitem__(index, value)  # and forgets

    def __iadd__(self, blocks: Iterable[ContentBlock]) -> Self:  # type: ignore[override,misc]
        self.extend(blocks)
        return self
