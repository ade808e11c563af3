"""The catalog parlour ships. Figures are the providers' published limits; the rung and
depth budgets are parlour's own translation of the seat's declarations into tokens.

A deployment with other models (or newer figures) loads its own file with
``ModelCatalog.load`` and lays it over this one with ``merged``.
"""

from __future__ import annotations

from .._roles import Depth, Grade, Input, OutputSize
from ._spec import ModelSpec, ThinkingMode

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
    )


def _gpt5(model_id: str, grade: Grade) -> ModelSpec:
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
    )


DEFAULT_SPECS: list[ModelSpec] = [
    _claude("claude-sonnet-4-5", Grade.MEDIUM),
    _claude("claude-haiku-4-5", Grade.SMALL),
    _claude("claude-opus-4-5", Grade.LARGE),
    _gpt5("gpt-5-mini", Grade.MEDIUM),
    _gpt5("gpt-5-nano", Grade.SMALL),
    _gpt5("gpt-5", Grade.LARGE),
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
