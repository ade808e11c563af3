"""What measures a conversation for the window manager: the ``TokenCounter`` interface and
``LocalTokenCounter``, the offline estimate (tiktoken, ``models._tokens``).

They live here, above the conversation, because both name it: the counting itself is the
conversation's (``get_total_tokens``, ``get_token_bound``) and ``models._tokens``', which
name no conversation. A provider's exact count (``AnthropicClient.count_tokens``) meets the
same interface without importing it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .._context import ConversationContext
from ..models._spec import ModelSpec

__all__ = ["LocalTokenCounter", "TokenCounter"]


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the input tokens a conversation would send. Implementations are stateless."""

    def count_tokens(self, conversation: ConversationContext) -> int: ...


class LocalTokenCounter:
    """The offline estimate: ``conversation.get_total_tokens(spec)``, the one local count
    (tiktoken in ``spec.encoding``, memoized per block; it renders nothing and freezes
    nothing)."""

    def __init__(self, spec: ModelSpec) -> None:
        self._spec = spec

    def count_tokens(self, conversation: ConversationContext) -> int:
        return conversation.get_total_tokens(self._spec)

    def bound_tokens(self, conversation: ConversationContext) -> int:
        """At least ``count_tokens(conversation)``, encoding nothing new (see
        ``ConversationContext.get_token_bound``)."""
        return conversation.get_token_bound(self._spec)
