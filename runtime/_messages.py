"""Messages: an ordered list of content blocks under a role, with per-message flags
(what a list of them says, its first utterance, its title, lives in ``_utterances.py``)."""

from __future__ import annotations

import itertools
import operator
import weakref
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Self, SupportsIndex

from ._handlers import ResponseHandler
from ._lists import Noted
from ._validation import check_text, is_valid_text
from .blocks import (
    ContentBlock,
    TextBlock,
    check_block,
    plainly_storable,
)
from .errors import DehydratedError

# the exact types a message's role and flags may have: what its stored form reads back
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "role": (str,),
    "compactable": (bool,),
    "app_authored": (bool,),
    "cache": (bool,),
    "requested_output_tokens": (int, type(None)),
}


# the memo slots: derived from the message, so writing one is no change to it
_MEMOS = frozenset({"_snapshot", "_turn", "_tokens"})
_UNSET = object()

# Every change to a message after its construction takes the next stamp and stores it in
# _last_change. A stamp is stored once (the counter is atomic under the GIL, the store is
# one item assignment), so _last_change never again holds a stamp read before a change.
_CHANGES = itertools.count(1)
_last_change = [0]


def last_change() -> int:
    """The stamp of the latest change to any message (construction and memos are none).

    Reading the same stamp again, on the thread that owns a conversation, proves that no
    message changed in between (see ``_settled.py``). Thread-safe.
    """
    return _last_change[0]


def note_change() -> None:
    """Move the change stamp: something a memo was derived from changed. Thread-safe."""
    _last_change[0] = next(_CHANGES)


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

    def __init__(self, owner: Message, blocks: Iterable[ContentBlock]) -> None:
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


class Message:
    """A message in a conversation. Not thread-safe: only the conversation's owner touches it.

    Its text, role, flags and every block are validated as they enter (on construction, on
    assignment, on every change to the block list): a lone surrogate, a flag or block field
    of the wrong type, or a PojoBlock value nested deeper than ``MAX_NESTING`` or not
    encodable raises ``ValueError`` naming the message's kind, role, block index and field,
    and the message is left as it was. So nothing a message holds can make a later save
    fail.

    ``role`` is a free string here on purpose: a wrong role is refused when the conversation
    is mapped to turns (``TurnRole.of``), never silently relabelled.
    """

    __slots__ = (
        "__weakref__",
        "_raw_content",
        "_snapshot",
        "_tokens",
        "_turn",
        "app_authored",
        "blocks",
        "cache",
        "compactable",
        "requested_output_tokens",
        "role",
    )
    _snapshot: Any
    _tokens: Any
    _turn: Any
    _raw_content: str | None
    role: str
    blocks: list[ContentBlock]
    compactable: bool
    app_authored: bool
    cache: bool
    requested_output_tokens: int | None

    def __init__(
        self,
        role: str,
        content: str | None = None,
        blocks: Iterable[ContentBlock] = (),
        *,
        compactable: bool = True,
        app_authored: bool = False,
        cache: bool = False,
        requested_output_tokens: int | None = None,
    ) -> None:
        # set slot by slot (the memos are empty, nothing to forget): one check per value,
        # and nothing built for the common case
        _set_snapshot(self, None)  # a MessageSnapshot, memoized by snapshots.py
        _set_turn(self, None)  # a Turn, memoized by the render (_render.py)
        _set_tokens(self, None)  # a token count, memoized by models._tokens
        if type(role) is not str or not role.isascii():
            self._check_field("role", role)
        _set_role(self, role)
        _set_blocks(self, _Blocks(self, blocks))
        if content is not None and (type(content) is not str or not content.isascii()):
            self._check_content(content)
        _set_raw_content(self, content)  # set here only
        if type(compactable) is not bool:
            self._check_field("compactable", compactable)
        if type(app_authored) is not bool:
            self._check_field("app_authored", app_authored)
        if type(cache) is not bool:
            self._check_field("cache", cache)
        if requested_output_tokens is not None and type(requested_output_tokens) is not int:
            self._check_field("requested_output_tokens", requested_output_tokens)
        _set_compactable(self, compactable)
        _set_app_authored(self, app_authored)
        _set_cache(self, cache)
        _set_requested_output_tokens(self, requested_output_tokens)

    def __setattr__(self, name: str, value: object) -> None:
        # a change forgets the memoized snapshot and turn (see snapshots.MessageSnapshot.of
        # and _render.py); re-setting the very value a field holds changes nothing, so it
        # keeps them. The block list reports its own in-place changes.
        if name == "blocks":
            value = _Blocks(self, value)  # type: ignore[arg-type]
        elif name in _MEMOS:
            object.__setattr__(self, name, value)
            return
        else:
            if name in _FIELD_TYPES:
                self._check_field(name, value)
            if getattr(self, name, _UNSET) is value:
                return
        object.__setattr__(self, name, value)
        self._forget()

    def _check_field(self, name: str, value: object) -> None:
        """Refuse a role or flag the stored form could not read back (``1`` for a bool
        encodes, and then never decodes)."""
        expected = _FIELD_TYPES[name]
        if type(value) in expected and (type(value) is not str or is_valid_text(value)):
            return
        where = f"{type(self).__name__} {name}"
        if isinstance(value, str):
            check_text(value, where)
        names = " or ".join("None" if t is type(None) else t.__name__ for t in expected)
        raise ValueError(f"{where} is {value!r} of type {type(value).__name__}, not {names}")

    def _check_content(self, content: object) -> None:
        if isinstance(content, str) and is_valid_text(content):
            return  # the common case builds no message text
        where = f"{type(self).__name__} (role {self.role!r}) content"
        if not isinstance(content, str):
            raise ValueError(f"{where} is of type {type(content).__name__}, not str; refused")
        check_text(content, where)

    def _forget(self) -> None:
        """Drop what was derived from this message (its snapshot, its turn, its token
        count), and move the change stamp."""
        _set_snapshot(self, None)
        _set_turn(self, None)
        _set_tokens(self, None)
        note_change()

    @property
    def raw_content(self) -> str:
        """The message's text: as given, else the concatenation of its text blocks."""
        if self._raw_content is not None:
            return self._raw_content
        return "".join(b.text for b in self.blocks if isinstance(b, TextBlock))

    @property
    def has_raw_text(self) -> bool:
        return self._raw_content is not None

    def add_text(self, text: str | None) -> None:
        """Append a text block; None or blank text adds nothing."""
        if text is not None and text.strip():
            self.add_block(TextBlock(text=text))

    def add_block(self, block: ContentBlock) -> None:
        self.blocks.append(block)

    def is_compactable(self) -> bool:
        return self.compactable

    def set_compactable(self, compactable: bool) -> None:
        self.compactable = compactable

    def set_cache(self, cache: bool) -> None:
        self.cache = cache

    def set_app_authored(self, app_authored: bool) -> None:
        self.app_authored = app_authored

    def __repr__(self) -> str:
        return f"{type(self).__name__}(role={self.role!r}, blocks={self.blocks!r})"


class _Channel(Message):
    """What an outgoing and an incoming message share: a response handler, and the
    constructor (each flag by name, not through ``**``: two messages are built a turn).
    ``role`` defaults to the channel's own."""

    __slots__ = ("response_handler",)
    response_handler: ResponseHandler | None
    _ROLE: ClassVar[str]

    def __init__(
        self,
        content: str | None = None,
        blocks: Iterable[ContentBlock] = (),
        *,
        response_handler: ResponseHandler | None = None,
        role: str | None = None,
        compactable: bool = True,
        app_authored: bool = False,
        cache: bool = False,
        requested_output_tokens: int | None = None,
    ) -> None:
        Message.__init__(
            self,
            self._ROLE if role is None else role,
            content,
            blocks,
            compactable=compactable,
            app_authored=app_authored,
            cache=cache,
            requested_output_tokens=requested_output_tokens,
        )
        _set_response_handler(self, response_handler)  # nothing to forget


# Each slot's own setter (its member descriptor's ``__set__``): construction, a restore
# and the memos set a slot with it, bypassing ``Message.__setattr__``. It costs half of
# ``object.__setattr__(m, name, v)``, which looks the name up and checks the class's
# bases before it sets anything (measured: 115 against 230 ns a slot).
_Setter = Callable[[Any, Any], None]
_set_snapshot: _Setter = Message.__dict__["_snapshot"].__set__
_set_turn: _Setter = Message.__dict__["_turn"].__set__
_set_tokens: _Setter = Message.__dict__["_tokens"].__set__
_set_role: _Setter = Message.__dict__["role"].__set__
_set_blocks: _Setter = Message.__dict__["blocks"].__set__
_set_raw_content: _Setter = Message.__dict__["_raw_content"].__set__
_set_compactable: _Setter = Message.__dict__["compactable"].__set__
_set_app_authored: _Setter = Message.__dict__["app_authored"].__set__
_set_cache: _Setter = Message.__dict__["cache"].__set__
_set_requested_output_tokens: _Setter = Message.__dict__["requested_output_tokens"].__set__
_set_response_handler: _Setter = _Channel.__dict__["response_handler"].__set__


class OutgoingMessage(_Channel):
    """A message to the model (the user channel), optionally with a response handler."""

    __slots__ = ()
    _ROLE = "user"


class IncomingMessage(_Channel):
    """A message from the model (the assistant channel)."""

    __slots__ = ()
    _ROLE = "assistant"

    def is_dehydrated(self) -> bool:
        """True for a restored message that has no handler to read its answer yet."""
        return self.response_handler is None

    def rehydrate(self, handler: ResponseHandler) -> None:
        self.response_handler = handler

    def get_response(self) -> Any:
        """The answer read through the response handler.

        Raises:
            DehydratedError: the message was restored and has not been rehydrated.
        """
        if self.response_handler is None:
            raise DehydratedError(
                "This message was restored without a response handler; "
                "call rehydrate(handler) first."
            )
        return self.response_handler.parse(self.raw_content)
