"""A model spec: one model's limits, the tokens each output rung and depth buys, what it
accepts, and how it reasons. Plain frozen data, so a catalog file decodes straight into it.
"""

from __future__ import annotations

import enum
from typing import Literal

import msgspec

from .._roles import Depth, Grade, Input, OutputSize

Provider = Literal["anthropic", "openai", "bedrock", "scripted"]
DEFAULT_ENCODING = "cl100k_base"  # the token estimate's encoding when a spec names none


class ThinkingMode(enum.Enum):
    """How a model reasons, and so what a call books for reasoning.

    ``ANTHROPIC``: extended thinking with a token budget, off at ``IMMEDIATE``.
    ``REASONING_EFFORT``: the model always reasons (an effort level), so the reserve books
    reasoning at every depth, ``IMMEDIATE`` included, and no thinking block comes back.
    ``NONE``: no reasoning channel.
    """

    NONE = "none"
    ANTHROPIC = "anthropic"
    REASONING_EFFORT = "reasoning_effort"

    def reasoning_reserved(self, depth: Depth) -> bool:
        """Whether a call at ``depth`` books reasoning headroom in its output reserve."""
        if self is ThinkingMode.REASONING_EFFORT:
            return True
        return self is ThinkingMode.ANTHROPIC and depth is not Depth.IMMEDIATE

    def thinking_active(self, spec: ModelSpec, depth: Depth) -> bool:
        """Whether a native thinking block is guaranteed for the call: the same predicate
        gates the request's thinking config and the response schema's reasoning strip."""
        return (
            self is ThinkingMode.ANTHROPIC
            and depth is not Depth.IMMEDIATE
            and spec.get_thinking_budget(depth) > 0
        )


class ModelSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One model: its limits, the tokens each output rung and depth buys, what it accepts.

    ``output_budgets`` must name every rung but ``MAX``, which defaults to the ceiling
    (``max_output_tokens``). A rung above the ceiling is allowed; resolution caps it.

    Raises:
        ValueError: (``msgspec.ValidationError`` when decoding) a limit is not positive or a
            rung is missing.
    """

    id: str
    provider: Provider
    max_context_tokens: int
    max_output_tokens: int
    output_budgets: dict[OutputSize, int]
    thinking_budgets: dict[Depth, int] = msgspec.field(default_factory=dict)
    thinking_mode: ThinkingMode = ThinkingMode.NONE
    supports_prompt_caching: bool = False
    encoding: str = DEFAULT_ENCODING
    grade: Grade | None = None
    inputs: frozenset[Input] = frozenset()
    comfort_window_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.max_context_tokens <= 0 or self.max_output_tokens <= 0:
            raise ValueError(f"Model {self.id}: token limits must be positive.")
        missing = [r.value for r in OutputSize if r is not OutputSize.MAX]
        missing = [r for r in missing if OutputSize(r) not in self.output_budgets]
        if missing:
            raise ValueError(f"Model {self.id} has no output budget for {', '.join(missing)}.")
        if any(v <= 0 for v in self.output_budgets.values()):
            raise ValueError(f"Model {self.id}: output budgets must be positive.")

    def get_output_budget(self, rung: OutputSize) -> int:
        """The tokens ``rung`` buys on this model (``MAX`` is the ceiling unless set)."""
        return self.output_budgets.get(rung, self.max_output_tokens)

    def get_thinking_budget(self, depth: Depth) -> int:
        """The reasoning tokens ``depth`` buys on this model; 0 when it buys none."""
        return self.thinking_budgets.get(depth, 0)

    def get_max_output_tokens(self) -> int:
        return self.max_output_tokens
