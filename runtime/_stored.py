"""A restored message rebuilt without its constructor's frames (the restore's hot path)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

from ._handlers import ResponseHandler
from ._messages import (
    IncomingMessage,
    Message,
    OutgoingMessage,
    StoredBlocks,
    _Blocks,
    _set_app_authored,
    _set_blocks,
    _set_cache,
    _set_compactable,
    _set_raw_content,
    _set_requested_output_tokens,
    _set_response_handler,
    _set_role,
    _set_snapshot,
    _set_tokens,
    _set_turn,
)
from ._validation import is_valid_text
from .blocks import ContentBlock

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
    ones (storable by construction, see ``StoredBlocks``). Built slot by slot when the
    role, text and flags are of the types the constructor takes at once; anything else
    goes through the constructor, which refuses what it must. A restore builds every
    message this way: four constructor frames and one of two lists fewer a message."""
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
