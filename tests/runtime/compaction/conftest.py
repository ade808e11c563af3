"""Conversations the compaction tests share: a chat with tool calls, and builders."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from parlour.runtime import (
    ConversationContext,
    Depth,
    IncomingMessage,
    OutgoingMessage,
    OutputSize,
)
from parlour.runtime.blocks import ContentBlock, TextBlock, ToolResultBlock, ToolUseBlock

WORDS = ["the", "survey", "found", "seven", "sites", "with", "readings", "above", "the", "agreed"]
WORDS += ["threshold"]


def prose(words: int, seed: int = 0) -> str:
    """``words`` words of deterministic prose (about one token a word)."""
    return " ".join(WORDS[(seed + i) % len(WORDS)] for i in range(words))


def declared(conversation: ConversationContext) -> ConversationContext:
    """The seat's declarations a reserve needs: IMMEDIATE, a COMPACT answer."""
    conversation.depth = Depth.IMMEDIATE
    conversation.output_declaration = OutputSize.COMPACT
    return conversation


def call(call_id: str, text: str = "Let me look.") -> IncomingMessage:
    blocks: list[ContentBlock] = [
        TextBlock(text=text),
        ToolUseBlock(id=call_id, name="search", input_json="{}"),
    ]
    return IncomingMessage(blocks=blocks)


def result(call_id: str, content: str) -> OutgoingMessage:
    return OutgoingMessage(blocks=[ToolResultBlock(tool_use_id=call_id, content=content)])


def answer(text: str, *, compactable: bool = True) -> IncomingMessage:
    return IncomingMessage(text, [TextBlock(text=text)], compactable=compactable)


def ask(text: str, *, compactable: bool = True) -> OutgoingMessage:
    return OutgoingMessage(text, [TextBlock(text=text)], compactable=compactable)


def six_message_chat() -> ConversationContext:
    """A question and a final answer the app protects, a tool call and its long result
    between them, an aside, and the latest question last."""
    c = declared(ConversationContext("six", user_id="alice"))
    c.put_main_objective("task", "Answer questions about the survey.")
    c.add_message(ask("Which sites were above the threshold?", compactable=False))
    c.add_message(call("toolu_1"))
    c.add_message(result("toolu_1", prose(400)))
    c.add_message(answer("Seven sites were above it.", compactable=False))
    c.add_message(answer("By the way, " + prose(120, 3)))
    c.add_message(ask("And which was highest?"))
    return c


def long_chat(exchanges: int, result_words: int = 500, cid: str = "long") -> ConversationContext:
    """``exchanges`` exchanges (question, tool call, long result, answer), then a question."""
    c = declared(ConversationContext(cid, user_id="alice"))
    c.put_main_objective("task", "Answer questions about the survey.")
    for n in range(exchanges):
        c.add_message(ask(f"Question {n}: " + prose(30, n)))
        c.add_message(call(f"toolu_{n}"))
        c.add_message(result(f"toolu_{n}", prose(result_words, n)))
        c.add_message(answer(f"Answer {n}: " + prose(60, n)))
    c.add_message(ask("What should we do next?"))
    return c


class Canned:
    """A summary callable answering the same text, recording every prompt."""

    def __init__(self, summary: str = "canned summary") -> None:
        self.summary = summary
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.summary


@pytest.fixture
def canned() -> Callable[..., Canned]:
    return Canned
