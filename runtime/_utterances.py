"""What a conversation's messages say: its first utterance, its title, the inputs its
outgoing messages carry."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ._messages import Message, OutgoingMessage
from ._roles import Input
from .blocks import ContentBlock, FileBlock, ImageBlock


def title_of(messages: Iterable[Message], untitled: str) -> str:
    """The first utterance, cut at 50 characters, or ``untitled``."""
    utterance = first_user_utterance(messages)
    if utterance is None:
        return untitled
    return utterance if len(utterance) <= 50 else utterance[:50] + "..."


def first_user_utterance(messages: Iterable[Message]) -> str | None:
    """The first non-blank text a human sent: a user-role message not app-authored."""
    for m in messages:
        if m.role == "user" and not m.app_authored:
            text = m.raw_content
            if text.strip():
                return text
    return None


def carried_inputs(messages: Iterable[Message]) -> set[Input]:
    """The inputs beyond text the outgoing messages carry: an image as ``Input.IMAGES``, a
    file as ``Input.DOCUMENTS``."""
    carried: set[Input] = set()
    for b in outgoing_blocks(messages):
        if isinstance(b, ImageBlock):
            carried.add(Input.IMAGES)
        elif isinstance(b, FileBlock):
            carried.add(Input.DOCUMENTS)
    return carried


def outgoing_blocks(messages: Iterable[Message]) -> Iterator[ContentBlock]:
    """Every block of the outgoing messages, in order."""
    for m in messages:
        if isinstance(m, OutgoingMessage):
            yield from m.blocks
