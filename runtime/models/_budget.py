"""Model bindings and output budget resolution: how much the next call may answer.

``ModelBinding.resolve_output_budget`` is the single source of truth for the next call's
output tokens. Three declaration layers and no default: the last outgoing message's
``requested_output_tokens``, then the conversation's output declaration (a rung translated
through the resolved spec, or a raw count), then the binding's own declaration. Nothing
declared anywhere is an error naming the seat. The result is capped at the model's ceiling.

A binding reads its conversation through the ``Seat`` protocol (what a
``ConversationContext`` offers), so this module imports nothing of the conversation's.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Protocol

from .._messages import Message, OutgoingMessage
from .._roles import Depth, Grade, OutputSize
from ..errors import UncorrectableLLMError
from ._spec import ModelSpec

OutputDeclaration = OutputSize | int


class Seat(Protocol):
    """What a binding reads of the conversation it is wired to (a ``ConversationContext``):
    its name, its declarations, its messages, and the spec that last served it."""

    @property
    def conversation_id(self) -> str | None: ...
    @property
    def prior_spec_id(self) -> str | None: ...
    @property
    def depth(self) -> Depth | None: ...
    @property
    def output_declaration(self) -> OutputDeclaration | None: ...
    @property
    def messages(self) -> Sequence[Message]: ...
    @property
    def model_binding(self) -> ModelBinding | None: ...


class ModelBinding:
    """A seat's model requirement (grade, depth, output), the spec it resolved to, and the
    next call's budgets, read from the binding and the conversation it is wired to.

    A binding is live state: it is never persisted. A restored conversation has none until
    the next turn attaches one (``ConversationContext.set_model_binding``) and resolves it.
    A binding serves the one conversation it is wired to (``set_model_binding`` rewires
    it); wired to none, or to one that is gone, it answers from its own declarations alone.
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
        self._conversation: weakref.ref[Seat] | None = None

    @property
    def conversation(self) -> Seat | None:
        """The conversation this binding is wired to (``set_model_binding``), held weakly:
        the conversation holds its binding, and a cycle would leave an evicted conversation
        to the cycle collector instead of freeing it at once. None when unwired or gone."""
        return None if self._conversation is None else self._conversation()

    @conversation.setter
    def conversation(self, context: Seat | None) -> None:
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

    @classmethod
    def of(cls, conversation: Seat) -> ModelBinding:
        """``conversation``'s binding; for one that has none, an empty binding wired to it
        but not attached (nothing of ``conversation`` changes), which answers from the
        conversation's own declarations."""
        binding = conversation.model_binding
        if binding is None:
            binding = cls()
            binding.conversation = conversation
        return binding

    def resolve(self, spec: ModelSpec) -> None:
        self.spec = spec

    def is_resolved(self) -> bool:
        return self.spec is not None

    def get_model(self) -> ModelSpec:
        """The spec this binding resolved to.

        Raises:
            UncorrectableLLMError: not resolved yet.
        """
        if self.spec is None:
            seat = self.conversation
            prior = None if seat is None else seat.prior_spec_id
            served = f" (it was last served by {prior})" if prior else ""
            raise UncorrectableLLMError(
                f"{_name(seat)} has no resolved model{served}: attach and resolve a "
                "ModelBinding (set_model_binding) before the call."
            )
        return self.spec

    def resolve_output_budget(self) -> int:
        """The next call's output budget on the resolved model.

        Raises:
            UncorrectableLLMError: the model is unresolved, or nothing declares an output size.
        """
        return self.budget_on(self.get_model())

    def budget_on(self, spec: ModelSpec) -> int:
        """The output budget of the next call on ``spec``, capped at its ceiling.

        Raises:
            UncorrectableLLMError: nothing declares an output size.
        """
        return min(self._declared_output(spec), spec.max_output_tokens)

    def resolve_depth(self) -> Depth:
        """The conversation's depth, else the binding's.

        Raises:
            UncorrectableLLMError: neither declares one.
        """
        seat = self.conversation
        if seat is not None and seat.depth is not None:
            return seat.depth
        if self.depth is not None:
            return self.depth
        raise UncorrectableLLMError(
            f"{_name(seat)} declares no depth (how hard the model thinks): give the agent "
            "one, Agent(..., depth=Depth.IMMEDIATE), or on a bare context set context.depth "
            "or bind a ModelBinding that declares one."
        )

    def output_reserve(self, spec: ModelSpec) -> int:
        """The whole output reserve on ``spec``: the budget plus the reasoning headroom the
        call books, clamped at the ceiling. Every client sends exactly this as its wire
        maximum.

        Raises:
            UncorrectableLLMError: nothing declares an output size or a depth.
        """
        return self.reserve_for(spec, self.budget_on(spec), self.resolve_depth())

    @staticmethod
    def reserve_for(spec: ModelSpec, budget: int, depth: Depth) -> int:
        """``output_reserve`` of a call whose budget on ``spec`` is ``budget`` at ``depth`` (a
        client that resolved both already: nothing is resolved again)."""
        if spec.thinking_mode.reasoning_reserved(depth):
            budget += spec.get_thinking_budget(depth)
        return min(budget, spec.max_output_tokens)

    def _declared_output(self, spec: ModelSpec) -> int:
        seat = self.conversation
        declaration = None
        if seat is not None:
            messages = seat.messages
            last = messages[-1] if messages else None
            if isinstance(last, OutgoingMessage) and last.requested_output_tokens is not None:
                return last.requested_output_tokens
            declaration = seat.output_declaration
        if declaration is None:
            declaration = self.output_declaration
        if declaration is None:
            raise UncorrectableLLMError(
                f"{_name(seat)} declares no output size (how long an answer may be): give "
                "the agent one, Agent(..., output=OutputSize.STANDARD), or on a bare context "
                "set output_declaration (a rung or a token count) or bind a ModelBinding "
                "that declares one."
            )
        if isinstance(declaration, OutputSize):
            return spec.get_output_budget(declaration)
        return declaration

    def __repr__(self) -> str:
        spec_id = self.spec.id if self.spec is not None else None
        return (
            f"ModelBinding(grade={self.grade}, depth={self.depth}, "
            f"output={self.output_declaration!r}, spec={spec_id!r})"
        )


def _name(seat: Seat | None) -> str:
    if seat is None:
        return "A model binding wired to no conversation"
    return f"Conversation {seat.conversation_id or '(unnamed)'}"
