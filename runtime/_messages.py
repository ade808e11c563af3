"""Messages: an ordered list of content blocks under a role, with per-message flags, and
their two constructors: ``Message.__init__`` (and the channels'), which checks what enters,
and ``stored_message``, which a restore builds every message with, slot by slot. (The
block list is ``_message_blocks.py``; what a list of messages says, its first utterance,
its title, lives in ``_utterances.py``.)"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from ._handlers import ResponseHandler
from ._message_blocks import StoredBlocks, _Blocks
from ._validation import check_text, is_valid_text
from .blocks import ContentBlock, TextBlock
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
        # and nothing built for the common case. A slot set here is set by stored_message
        # (below) too: test_snapshot_revival.py fails when the two disagree.
        _set_snapshot(self, None)  # a MessageSnapshot, memoized by _message_snapshot.py
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
        # a change forgets the memoized snapshot and turn (see MessageSnapshot.of
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


# -- the second constructor: a restored message ------------------------------------------

_KINDS: dict[str, type[Message]] = {
    "outgoing": OutgoingMessage,
    "incoming": IncomingMessage,
    "plain": Message,
}


def stored_message(
    direction: str,
    role: str,
    content: str | None,
    blocks: Iterable[ContentBlock],
    flags: tuple[bool, bool, bool, int | None],
    handler: ResponseHandler | None,
) -> Message:
    """The message of a stored snapshot: ``direction`` picks the kind, ``flags`` are
    (compactable, app_authored, cache, requested_output_tokens), ``blocks`` are decoded
    ones (storable by construction, see ``StoredBlocks``). Built slot by slot, through each
    slot's own setter, when the role, text and flags are of the types the constructor
    takes at once; anything else goes through the constructor, which refuses what it must.
    A restore builds every message this way: four constructor frames and one of two lists
    fewer a message. It sets every slot ``Message.__init__`` sets, and the channels'."""
    cls = _KINDS.get(direction, Message)  # as before: any other direction is plain
    compactable, app_authored, cache, requested = flags
    if not (
        type(role) is str
        and (role.isascii() or is_valid_text(role))
        and (
            content is None
            or (type(content) is str and (content.isascii() or is_valid_text(content)))
        )
        and type(compactable) is bool
        and type(app_authored) is bool
        and type(cache) is bool
        and (requested is None or type(requested) is int)
    ):
        checked: dict[str, Any] = {
            "compactable": compactable,
            "app_authored": app_authored,
            "cache": cache,
            "requested_output_tokens": requested,
        }
        if cls is Message:
            return Message(role, content, StoredBlocks(blocks), **checked)
        channel: Any = cls  # an OutgoingMessage or IncomingMessage
        return channel(  # type: ignore[no-any-return]
            content, StoredBlocks(blocks), role=role, response_handler=handler, **checked
        )
    message = object.__new__(cls)
    listed = _Blocks.__new__(_Blocks)
    list.extend(listed, blocks)
    listed._owner = weakref.ref(message)
    _set_snapshot(message, None)
    _set_turn(message, None)
    _set_tokens(message, None)
    _set_role(message, role)
    _set_blocks(message, listed)
    _set_raw_content(message, content)
    _set_compactable(message, compactable)
    _set_app_authored(message, app_authored)
    _set_cache(message, cache)
    _set_requested_output_tokens(message, requested)
    if cls is not Message:
        _set_response_handler(message, handler)
    return message
