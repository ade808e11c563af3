"""Images and files as the providers take them: from the user only.

An application may keep an image in an assistant message (one its image model made, say),
and Anthropic (``'image' blocks are not permitted within assistant turns``), OpenAI
(``Image URLs are only allowed for messages with role 'user'``) and Converse (images and
documents only if the role is user) refuse it, on every later request of the conversation.
``user_media`` moves each one to the end of the next user turn, where the model still sees
it, and leaves a note in its place; with no user turn after it, the note alone.
"""

from __future__ import annotations

import msgspec

from .._prepared import Turn
from .._roles import TurnRole
from ..blocks import ContentBlock, FileBlock, ImageBlock, TextBlock

_MEDIA = (ImageBlock, FileBlock)
_MEDIA_TYPES: frozenset[type] = frozenset(_MEDIA)


def user_media(turns: list[Turn]) -> list[Turn]:
    """``turns`` with every image and file of an assistant turn moved to the end of the next
    user turn (a note in its place); the list itself when no assistant turn holds one, the
    usual case."""
    assistant = TurnRole.ASSISTANT
    if not any(
        t.role is assistant and not _MEDIA_TYPES.isdisjoint(map(type, t.blocks)) for t in turns
    ):
        return turns
    last_user = max((i for i, t in enumerate(turns) if t.role is TurnRole.USER), default=-1)
    out: list[Turn] = []
    carried: list[ContentBlock] = []
    for index, turn in enumerate(turns):
        if turn.role is TurnRole.USER:
            if carried:
                turn = msgspec.structs.replace(turn, blocks=[*turn.blocks, *carried])
                carried = []
            out.append(turn)
            continue
        media = [b for b in turn.blocks if isinstance(b, _MEDIA)]
        if not media:
            out.append(turn)
            continue
        later = index < last_user
        blocks = [_note(b, later) if isinstance(b, _MEDIA) else b for b in turn.blocks]
        out.append(msgspec.structs.replace(turn, blocks=blocks))
        if later:
            carried.extend(media)
    return out


def _note(block: ImageBlock | FileBlock, later: bool) -> TextBlock:
    what = f"A file ({block.filename or 'unnamed'})" if type(block) is FileBlock else "An image"
    where = "it follows in the next message" if later else "it is not sent"
    return TextBlock(text=f"({what} was shown here; {where}.)")
