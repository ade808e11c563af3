"""A restored message rebuilt without its constructor's frames (the restore's hot path)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

from parlour.runtime._handlers import ResponseHandler
from parlour.runtime._messages import (
    IncomingMessage,
    Message,
    OutgoingMessage,
    StoredBlocks,
    _Blocks,
)
from parlour.runtime._validation import is_valid_text
from parlour.runtime.blocks import ContentBlock

_init = object.__setattr__
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
    _init(message, "_snapshot", None)
    _init(message, "_turn", None)
    _init(message, "_tokens", None)
    _init(message, "role", role)
    _init(message, "blocks", listed)
    _init(message, "_raw_content", content)
    _init(message, "compactable", compactable)
    _init(message, "app_authored", app_authored)
    _init(message, "cache", cache)
    _init(message, "requested_output_tokens", requested)
    if cls is not Message:
        _init(message, "response_handler", handler)
    return message
