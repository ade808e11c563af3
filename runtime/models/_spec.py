"""A model spec: one model's limits, the tokens each output rung and depth buys, what it
accepts, how it reasons, and the rate limits a provider puts on it. Plain frozen data, so a
catalog file decodes straight into it.
"""

from __future__ import annotations

import enum
from typing import Literal

import msgspec

from .._roles import Depth, Grade, Input, OutputSize

Provider = Literal["anthropic", "openai", "bedrock", "scripted"]
DEFAULT_ENCODING = "cl100k_base"  # the token estimate's encoding when a spec names none
# a model declared outside the catalog: the catalog's rungs, under a ceiling of at most a
# quarter of its window (room left for the conversation) and at most 32,000 tokens
_CUSTOM_RUNGS = {
    OutputSize.VERDICT: 1_024,
    OutputSize.COMPACT: 4_096,
    OutputSize.STANDARD: 16_000,
    OutputSize.EXTENDED: 32_000,
}
_CUSTOM_CEILING = 32_000


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


class RateLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How much a provider lets one account send a model; None leaves a measure unlimited.

    Providers set these per account tier, so a catalog's figures are one documented tier's
    and an application sets its own (``parlour.actors.tuning.set_model_limits``). Token
    limits count what a call books before it is sent: its input estimate, and its whole
    output reserve (the wire ``max_tokens``), as Anthropic and Bedrock pre-debit it.

    Attributes:
        requests_per_minute: requests begun per minute.
        tokens_per_minute: input plus output tokens per minute (OpenAI's, Bedrock's), cached
            input included.
        input_tokens_per_minute: input tokens per minute (Anthropic's ITPM): those read
            from the prompt cache are not counted, as Anthropic does not count them.
        output_tokens_per_minute: output tokens per minute (Anthropic's OTPM).
        concurrency: calls in flight at once (no provider publishes one: an
            application's own cap).

    Raises:
        ValueError: (``msgspec.ValidationError`` when decoding) a limit is not a whole
            number of at least 1.
    """

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    input_tokens_per_minute: int | None = None
    output_tokens_per_minute: int | None = None
    concurrency: int | None = None

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 1):
                raise ValueError(
                    f"A rate limit must be a whole number of at least 1; {name} is {value!r}."
                )

    @property
    def empty(self) -> bool:
        """True when no measure is limited."""
        return all(getattr(self, name) is None for name in self.__struct_fields__)


class ModelSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One model: its limits, the tokens each output rung and depth buys, what it accepts.

    ``output_budgets`` must name every rung but ``MAX``, which defaults to the ceiling
    (``max_output_tokens``). A rung above the ceiling is allowed; resolution caps it.
    ``rate_limits`` is what the provider lets an account of the catalog's documented tier
    send (None: unknown); a limiter follows it only where the application opts in.

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
    rate_limits: RateLimits | None = None

    def __post_init__(self) -> None:
        if self.max_context_tokens <= 0 or self.max_output_tokens <= 0:
            raise ValueError(f"Model {self.id}: token limits must be positive.")
        missing = [r.value for r in OutputSize if r is not OutputSize.MAX]
        missing = [r for r in missing if OutputSize(r) not in self.output_budgets]
        if missing:
            raise ValueError(f"Model {self.id} has no output budget for {', '.join(missing)}.")
        if any(v <= 0 for v in self.output_budgets.values()):
            raise ValueError(f"Model {self.id}: output budgets must be positive.")

    @classmethod
    def custom(
        cls,
        model_id: str,
        *,
        context_window: int,
        provider: Provider = "openai",
        max_output_tokens: int | None = None,
        inputs: frozenset[Input] = frozenset(),
        grade: Grade | None = None,
    ) -> ModelSpec:
        """A model the catalog does not know (a local one, say), from its context window.

        The ceiling is ``max_output_tokens``, else a quarter of the window, at most 32,000;
        each rung is the catalog's, at most the ceiling. No thinking is asked for and no
        prompt cache assumed; ``inputs`` is text only unless given.

        Raises:
            ValueError: ``context_window`` or ``max_output_tokens`` is not a positive
                integer, or the ceiling is larger than the window.
        """
        for name, value in (
            ("context_window", context_window),
            ("max_output_tokens", max_output_tokens),
        ):
            if value is not None and (type(value) is not int or value <= 0):
                raise ValueError(
                    f"Model {model_id}: {name} must be a positive integer, not {value!r}."
                )
        ceiling = max_output_tokens or min(context_window // 4 or 1, _CUSTOM_CEILING)
        if ceiling > context_window:
            raise ValueError(
                f"Model {model_id}: max_output_tokens {ceiling} is larger than its "
                f"context window of {context_window}."
            )
        return cls(
            id=model_id,
            provider=provider,
            max_context_tokens=context_window,
            max_output_tokens=ceiling,
            output_budgets={rung: min(n, ceiling) for rung, n in _CUSTOM_RUNGS.items()},
            inputs=inputs,
            grade=grade,
        )

    def get_output_budget(self, rung: OutputSize) -> int:
        """The tokens ``rung`` buys on this model (``MAX`` is the ceiling unless set)."""
        return self.output_budgets.get(rung, self.max_output_tokens)

    def get_thinking_budget(self, depth: Depth) -> int:
        """The reasoning tokens ``depth`` buys on this model; 0 when it buys none."""
        return self.thinking_budgets.get(depth, 0)

    def get_max_output_tokens(self) -> int:
        return self.max_output_tokens
