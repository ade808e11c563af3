"""The catalog parlour ships. Figures are the providers' published limits; the rung and
depth budgets are parlour's own translation of the seat's declarations into tokens.

Rate limits are each provider's first paid tier, as published in 2025 (Anthropic's Tier 1:
per model class, input and output tokens counted apart; OpenAI's Tier 1: input plus output
tokens together), so an account of that tier or above that follows them is never refused
for its rate. None where no figure is published for every account (Bedrock's quotas are per
account and region; gpt-5-nano's and gpt-4.1's were not checked). An account of a higher
tier sets its own with ``parlour.actors.tuning.set_model_limits``.

A deployment with other models (or newer figures) loads its own file with
``ModelCatalog.load`` and lays it over this one with ``merged``.
"""

from __future__ import annotations

from .._roles import Depth, Grade, Input, OutputSize
from ._spec import ModelSpec, RateLimits, ThinkingMode

_RUNGS = {
    OutputSize.VERDICT: 1_024,
    OutputSize.COMPACT: 4_096,
    OutputSize.STANDARD: 16_000,
    OutputSize.EXTENDED: 32_000,
}
_CLAUDE_THINKING = {
    Depth.STANDARD: 4_096,
    Depth.THOROUGH: 16_000,
    Depth.ULTRA_THOROUGH: 32_000,
}
# A reasoning-effort model reasons even at its lowest effort, so IMMEDIATE books tokens too.
_EFFORT_THINKING = {
    Depth.IMMEDIATE: 1_024,
    Depth.STANDARD: 4_096,
    Depth.THOROUGH: 16_000,
    Depth.ULTRA_THOROUGH: 32_000,
}
_VISION = frozenset({Input.IMAGES, Input.DOCUMENTS})
# Anthropic Tier 1: requests, input tokens and output tokens per minute, per model class
_ANTHROPIC_TIER_1 = {
    Grade.LARGE: RateLimits(
        requests_per_minute=50, input_tokens_per_minute=30_000, output_tokens_per_minute=8_000
    ),
    Grade.MEDIUM: RateLimits(
        requests_per_minute=50, input_tokens_per_minute=30_000, output_tokens_per_minute=8_000
    ),
    Grade.SMALL: RateLimits(
        requests_per_minute=50, input_tokens_per_minute=50_000, output_tokens_per_minute=10_000
    ),
}
# OpenAI Tier 1 (September 2025): requests and input plus output tokens per minute
_OPENAI_TIER_1 = RateLimits(requests_per_minute=500, tokens_per_minute=500_000)


def _claude(model_id: str, grade: Grade, provider: str = "anthropic") -> ModelSpec:
    native = provider == "anthropic"
    return ModelSpec(
        id=model_id,
        provider="anthropic" if native else "bedrock",
        grade=grade,
        max_context_tokens=200_000,
        max_output_tokens=64_000,
        output_budgets=dict(_RUNGS),
        # The Bedrock client speaks the text dialect and sends no thinking or cache config.
        thinking_budgets=dict(_CLAUDE_THINKING) if native else {},
        thinking_mode=ThinkingMode.ANTHROPIC if native else ThinkingMode.NONE,
        supports_prompt_caching=native,
        inputs=_VISION,
        rate_limits=_ANTHROPIC_TIER_1[grade] if native else None,
    )


def _gpt5(model_id: str, grade: Grade, rate_limits: RateLimits | None = None) -> ModelSpec:
    return ModelSpec(
        id=model_id,
        provider="openai",
        grade=grade,
        max_context_tokens=400_000,
        max_output_tokens=128_000,
        output_budgets=dict(_RUNGS),
        thinking_budgets=dict(_EFFORT_THINKING),
        thinking_mode=ThinkingMode.REASONING_EFFORT,
        supports_prompt_caching=True,  # automatic on OpenAI; reported as cached_tokens
        inputs=frozenset({Input.IMAGES}),
        rate_limits=rate_limits,
    )


DEFAULT_SPECS: list[ModelSpec] = [
    _claude("claude-sonnet-4-5", Grade.MEDIUM),
    _claude("claude-haiku-4-5", Grade.SMALL),
    _claude("claude-opus-4-5", Grade.LARGE),
    _gpt5("gpt-5-mini", Grade.MEDIUM, _OPENAI_TIER_1),
    _gpt5("gpt-5-nano", Grade.SMALL),
    _gpt5("gpt-5", Grade.LARGE, _OPENAI_TIER_1),
    ModelSpec(
        id="gpt-4.1",
        provider="openai",
        max_context_tokens=1_047_576,
        max_output_tokens=32_768,
        output_budgets=dict(_RUNGS),
        supports_prompt_caching=True,
        inputs=frozenset({Input.IMAGES}),
    ),
    _claude("us.anthropic.claude-sonnet-4-5-20250929-v1:0", Grade.MEDIUM, "bedrock"),
    _claude("us.anthropic.claude-haiku-4-5-20251001-v1:0", Grade.SMALL, "bedrock"),
    _claude("us.anthropic.claude-opus-4-5-20251101-v1:0", Grade.LARGE, "bedrock"),
    ModelSpec(
        id="scripted",
        provider="scripted",
        max_context_tokens=200_000,
        max_output_tokens=64_000,
        output_budgets=dict(_RUNGS),
        inputs=_VISION,
    ),
]
