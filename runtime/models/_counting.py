"""Token counting behind one interface: a local tiktoken estimate, or a provider's exact
count (``AnthropicClient.count_tokens``, through its count_tokens endpoint).

Counting renders an unfrozen copy of the conversation, so it never freezes the head, binds
a model or touches the prefix-stability records of the conversation itself.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from parlour.runtime._context import ConversationContext
from parlour.runtime._handlers import ContentFormatter
from parlour.runtime._prepared import PreparedConversation
from parlour.runtime.models._spec import ModelSpec


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


class LocalTokenCounter:
    """The offline estimate: ``conversation.get_total_tokens(spec)``, the one local count
    (tiktoken in ``spec.encoding``, memoized per block; it renders nothing and freezes
    nothing)."""

    def __init__(self, spec: ModelSpec) -> None:
        self._spec = spec

    def count_tokens(self, conversation: ConversationContext) -> int:
        return conversation.get_total_tokens(self._spec)
