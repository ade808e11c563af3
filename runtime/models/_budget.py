"""Model bindings and output budget resolution: how much the next call may answer.

``resolve_output_budget`` is the single source of truth for the next call's output tokens.
Three declaration layers and no default: the last outgoing message's
``requested_output_tokens``, then the conversation's output declaration (a rung translated
through the resolved spec, or a raw count), then the wired binding's declaration. Nothing
declared anywhere is an error naming the seat. The result is capped at the model's ceiling.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from .._messages import OutgoingMessage
from .._roles import Depth, Grade, OutputSize
from ..errors import UncorrectableLLMError
from ._spec import ModelSpec

if TYPE_CHECKING:
    from .._context import ConversationContext

OutputDeclaration = OutputSize | int


class ModelBinding:
    """A seat's model requirement (grade, depth, output), and the spec it resolved to.

    A binding is live state: it is never persisted. A restored conversation has none until
    the next turn attaches one (``ConversationContext.set_model_binding``) and resolves it.
    Not thread-safe; it belongs to its conversation's owner.
    """

    def __init__(
        self,
        grade: Grade | None = None,
        depth: Depth | None = None,
        output_declaration: OutputDeclaration | None = None,
        spec: ModelSpec | None = None,
    ) -> None:
        self.grade = grade
        self.depth = depth
        self.output_declaration = output_declaration
        self.spec = spec
        self._conversation: weakref.ref[ConversationContext] | None = None

    @property
    def conversation(self) -> ConversationContext | None:
        """The conversation this binding is wired to (``set_model_binding``), held weakly:
        the conversation holds its binding, and a cycle would leave an evicted conversation
        to the cycle collector instead of freeing it at once. None when unwired or gone."""
        return None if self._conversation is None else self._conversation()

    @conversation.setter
    def conversation(self, context: ConversationContext | None) -> None:
        self._conversation = None if context is None else weakref.ref(context)

    @classmethod
    def resolved(
        cls,
        spec: ModelSpec,
        *,
        depth: Depth | None = None,
        output_declaration: OutputDeclaration | None = None,
    ) -> ModelBinding:
        """A binding already resolved on ``spec``, declaring ``depth`` and the output."""
        return cls(spec.grade, depth, output_declaration, spec)

    def resolve(self, spec: ModelSpec) -> None:
        self.spec = spec

    def is_resolved(self) -> bool:
        return self.spec is not None

    def __repr__(self) -> str:
        spec_id = self.spec.id if self.spec is not None else None
        return (
            f"ModelBinding(grade={self.grade}, depth={self.depth}, "
            f"output={self.output_declaration!r}, spec={spec_id!r})"
        )


def _seat(context: ConversationContext) -> str:
    return f"Conversation {context.conversation_id or '(unnamed)'}"


def get_model(context: ConversationContext) -> ModelSpec:
    """The spec the conversation's binding resolved to.

    Raises:
        UncorrectableLLMError: no binding, or one not resolved yet.
    """
    binding = context.model_binding
    if binding is None or binding.spec is None:
        prior = f" (it was last served by {context.prior_spec_id})" if context.prior_spec_id else ""
        raise UncorrectableLLMError(
            f"{_seat(context)} has no resolved model{prior}: attach and resolve a "
            "ModelBinding (set_model_binding) before the call."
        )
    return binding.spec


def is_model_resolved(context: ConversationContext) -> bool:
    binding = context.model_binding
    return binding is not None and binding.spec is not None


def served_spec_id(context: ConversationContext) -> str | None:
    """The spec id a snapshot records: the bound spec's, else the prior one carried forward."""
    binding = context.model_binding  # read here, not through get_model: every snapshot asks
    spec = None if binding is None else binding.spec
    return context.prior_spec_id if spec is None else spec.id


def _declared_output(context: ConversationContext, spec: ModelSpec) -> int:
    last = context.messages[-1] if context.messages else None
    if isinstance(last, OutgoingMessage) and last.requested_output_tokens is not None:
        return last.requested_output_tokens
    declaration = context.output_declaration
    if declaration is None and context.model_binding is not None:
        declaration = context.model_binding.output_declaration
    if declaration is None:
        raise UncorrectableLLMError(
            f"{_seat(context)} declares no output size: its seat never said how much it "
            "answers. Declare an OutputSize rung or a token count (output_declaration), or "
            "bind a ModelBinding that declares one."
        )
    if isinstance(declaration, OutputSize):
        return spec.get_output_budget(declaration)
    return declaration


def budget_on(context: ConversationContext, spec: ModelSpec) -> int:
    """The output budget of the next call on ``spec``, capped at its ceiling.

    Raises:
        UncorrectableLLMError: nothing declares an output size.
    """
    return min(_declared_output(context, spec), spec.max_output_tokens)


def resolve_output_budget(context: ConversationContext) -> int:
    """The next call's output budget on the resolved model.

    Raises:
        UncorrectableLLMError: the model is unresolved, or nothing declares an output size.
    """
    return budget_on(context, get_model(context))


def resolve_depth(context: ConversationContext) -> Depth:
    """The conversation's depth, else the binding's.

    Raises:
        UncorrectableLLMError: neither declares one.
    """
    if context.depth is not None:
        return context.depth
    binding = context.model_binding
    if binding is not None and binding.depth is not None:
        return binding.depth
    raise UncorrectableLLMError(
        f"{_seat(context)} declares no depth: declare one (context.depth) or bind a "
        "ModelBinding that declares one."
    )


def output_reserve(context: ConversationContext, spec: ModelSpec) -> int:
    """The whole output reserve on ``spec``: the budget plus the reasoning headroom the call
    books, clamped at the ceiling. Every client sends exactly this as its wire maximum.

    Raises:
        UncorrectableLLMError: nothing declares an output size or a depth.
    """
    return reserve_for(spec, budget_on(context, spec), resolve_depth(context))


def reserve_for(spec: ModelSpec, budget: int, depth: Depth) -> int:
    """``output_reserve`` of a call whose budget on ``spec`` is ``budget`` at ``depth`` (a
    client that resolved both already: nothing is resolved again)."""
    if spec.thinking_mode.reasoning_reserved(depth):
        budget += spec.get_thinking_budget(depth)
    return min(budget, spec.max_output_tokens)
