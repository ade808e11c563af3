"""The model catalog: shipped entries, grade resolution, loading a user's file."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parlour.runtime import (
    Depth,
    Grade,
    ModelCatalog,
    ModelSpec,
    OutputSize,
    RateLimits,
    ThinkingMode,
    resolve_grade,
)
from parlour.runtime.errors import UncorrectableLLMError
from parlour.runtime.testing import fake_spec


def test_the_default_catalog_serves_every_provider_at_each_shipped_grade() -> None:
    catalog = ModelCatalog.default()
    for provider in ("anthropic", "openai", "bedrock"):
        for grade in (Grade.SMALL, Grade.MEDIUM, Grade.LARGE):
            spec = catalog.for_grade(grade, [provider])
            assert (spec.provider, spec.grade) == (provider, grade)
            assert spec.get_output_budget(OutputSize.MAX) == spec.max_output_tokens


def test_provider_order_decides_between_entries_of_one_grade() -> None:
    catalog = ModelCatalog.default()
    assert catalog.for_grade(Grade.MEDIUM, ["openai", "anthropic"]).provider == "openai"
    assert catalog.for_grade(Grade.MEDIUM, ["anthropic", "openai"]).provider == "anthropic"


def test_a_grade_without_an_entry_takes_the_nearest_larger_then_smaller() -> None:
    catalog = ModelCatalog(
        [fake_spec(id="small", grade=Grade.SMALL), fake_spec(id="large", grade=Grade.LARGE)]
    )
    assert catalog.for_grade(Grade.MEDIUM).id == "large"
    assert catalog.for_grade(Grade.MEGA).id == "large"
    assert (
        ModelCatalog([fake_spec(id="small", grade=Grade.SMALL)]).for_grade(Grade.MEGA).id == "small"
    )
    with pytest.raises(UncorrectableLLMError, match="serves grade"):
        catalog.for_grade(Grade.SMALL, ["openai"])


def test_resolving_needs_a_declared_grade() -> None:
    assert resolve_grade(Grade.SMALL, providers=["anthropic"]).id == "claude-haiku-4-5"
    with pytest.raises(UncorrectableLLMError, match="declares no grade"):
        resolve_grade(None)


def test_an_unknown_id_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="claude-sonnet-4-5"):
        ModelCatalog.default().get("no-such-model")


def test_thinking_modes_book_reasoning_as_documented() -> None:
    assert not ThinkingMode.ANTHROPIC.reasoning_reserved(Depth.IMMEDIATE)
    assert ThinkingMode.ANTHROPIC.reasoning_reserved(Depth.STANDARD)
    assert ThinkingMode.REASONING_EFFORT.reasoning_reserved(Depth.IMMEDIATE)
    assert not ThinkingMode.NONE.reasoning_reserved(Depth.ULTRA_THOROUGH)
    spec = fake_spec()
    assert spec.thinking_mode.thinking_active(spec, Depth.THOROUGH)
    assert not spec.thinking_mode.thinking_active(spec, Depth.IMMEDIATE)
    effort = fake_spec(thinking_mode=ThinkingMode.REASONING_EFFORT)
    assert not effort.thinking_mode.thinking_active(effort, Depth.THOROUGH)


JSON_CATALOG = """{"models": [{
  "id": "acme-1", "provider": "openai", "grade": "small",
  "max_context_tokens": 8000, "max_output_tokens": 2000,
  "output_budgets": {"verdict": 100, "compact": 500, "standard": 1000, "extended": 3000},
  "thinking_mode": "none", "encoding": "cl100k_base"
}]}"""

TOML_CATALOG = """
[[models]]
id = "acme-2"
provider = "anthropic"
grade = "medium"
max_context_tokens = 100000
max_output_tokens = 8000
supports_prompt_caching = true
thinking_mode = "anthropic"
[models.output_budgets]
verdict = 100
compact = 500
standard = 1000
extended = 3000
[models.thinking_budgets]
standard = 2000
"""


def test_a_users_json_and_toml_files_load_and_lay_over_the_default(tmp_path: Path) -> None:
    (tmp_path / "models.json").write_text(JSON_CATALOG)
    (tmp_path / "models.toml").write_text(TOML_CATALOG)
    mine = ModelCatalog.load(tmp_path / "models.json").merged(
        ModelCatalog.load(tmp_path / "models.toml")
    )
    acme1, acme2 = mine.get("acme-1"), mine.get("acme-2")
    assert acme1.get_output_budget(OutputSize.EXTENDED) == 3000
    assert acme1.get_output_budget(OutputSize.MAX) == 2000
    assert acme2.get_thinking_budget(Depth.STANDARD) == 2000
    assert acme2.get_thinking_budget(Depth.THOROUGH) == 0
    merged = ModelCatalog.default().merged(mine)
    assert "acme-2" in merged and "claude-sonnet-4-5" in merged
    assert merged.for_grade(Grade.SMALL, ["openai"]).id in {"gpt-5-nano", "acme-1"}


def test_a_catalog_entry_may_carry_rate_limits_and_a_wrong_one_is_refused(
    tmp_path: Path,
) -> None:
    limited = TOML_CATALOG + "[models.rate_limits]\nrequests_per_minute = 50\n"
    (tmp_path / "models.toml").write_text(limited + "output_tokens_per_minute = 8000\n")
    acme = ModelCatalog.load(tmp_path / "models.toml").get("acme-2")
    assert acme.rate_limits == RateLimits(requests_per_minute=50, output_tokens_per_minute=8_000)
    for wrong in ("tokens_per_hour = 5\n", "concurrency = 0\n"):
        (tmp_path / "models.toml").write_text(limited + wrong)
        with pytest.raises(ValueError, match=r"models\.toml"):
            ModelCatalog.load(tmp_path / "models.toml")
    assert ModelSpec.custom("local", context_window=32_000).rate_limits is None
    shipped = {spec.id: spec.rate_limits for spec in ModelCatalog.default()}
    assert shipped["claude-sonnet-4-5"] == RateLimits(
        requests_per_minute=50, input_tokens_per_minute=30_000, output_tokens_per_minute=8_000
    )
    assert shipped["gpt-5"] == RateLimits(requests_per_minute=500, tokens_per_minute=500_000)
    assert shipped["us.anthropic.claude-sonnet-4-5-20250929-v1:0"] is None


def test_a_bad_catalog_file_is_refused_with_its_path(tmp_path: Path) -> None:
    bad = tmp_path / "models.json"
    bad.write_text(
        '{"models": [{"id": "x", "provider": "openai", "max_context_tokens": 1, '
        '"max_output_tokens": 1, "output_budgets": {"verdict": 1}}]}'
    )
    with pytest.raises(ValueError, match=r"models\.json"):
        ModelCatalog.load(bad)
    with pytest.raises(ValueError, match=r"\.json or \.toml"):
        ModelCatalog.load(tmp_path / "models.yaml")


def test_a_spec_without_every_rung_is_refused() -> None:
    with pytest.raises(ValueError, match="no output budget for"):
        fake_spec(output_budgets={OutputSize.VERDICT: 10})


@given(
    st.integers(1, 10**6),
    st.integers(1, 10**6),
    st.lists(st.integers(1, 10**5), min_size=4, max_size=4),
    st.sampled_from(list(ThinkingMode)),
)
def test_a_spec_round_trips_through_json(
    context: int, ceiling: int, rungs: list[int], mode: ThinkingMode
) -> None:
    spec = fake_spec(
        max_context_tokens=context,
        max_output_tokens=ceiling,
        output_budgets=dict(
            zip([s for s in OutputSize if s is not OutputSize.MAX], rungs, strict=True)
        ),
        thinking_mode=mode,
    )
    assert msgspec.json.decode(msgspec.json.encode(spec), type=ModelSpec) == spec


# -- a model outside the catalog -----------------------------------------------------------------


def test_a_custom_model_takes_its_budgets_from_its_context_window() -> None:
    spec = ModelSpec.custom("llama3.1:8b", context_window=128_000)
    assert (spec.id, spec.provider, spec.max_context_tokens) == ("llama3.1:8b", "openai", 128_000)
    assert spec.max_output_tokens == 32_000  # a quarter of the window, at most 32,000
    assert spec.get_output_budget(OutputSize.STANDARD) == 16_000
    assert spec.thinking_mode is ThinkingMode.NONE and not spec.supports_prompt_caching
    small = ModelSpec.custom("phi3:mini", context_window=4_096)
    assert small.max_output_tokens == 1_024
    assert {small.get_output_budget(rung) for rung in OutputSize} == {1_024}
    fixed = ModelSpec.custom("m", context_window=8_192, max_output_tokens=3_000)
    assert fixed.get_output_budget(OutputSize.COMPACT) == 3_000


@given(st.integers(1, 2_000_000))
def test_every_rung_of_a_custom_model_fits_its_window(window: int) -> None:
    spec = ModelSpec.custom("m", context_window=window)
    assert 0 < spec.max_output_tokens <= window
    assert all(0 < spec.get_output_budget(r) <= spec.max_output_tokens for r in OutputSize)


@pytest.mark.parametrize(
    ("window", "ceiling", "named"),
    [
        (0, None, "context_window"),
        (-5, None, "context_window"),
        (True, None, "context_window"),
        ("8k", None, "context_window"),
        (8_192, 0, "max_output_tokens"),
        (8_192, 9_000, "larger than its context window"),
    ],
)
def test_a_custom_model_with_a_bad_size_is_one_clear_error(
    window: object, ceiling: object, named: str
) -> None:
    with pytest.raises(ValueError, match=named) as caught:
        ModelSpec.custom("m", context_window=window, max_output_tokens=ceiling)  # type: ignore[arg-type]
    assert "Model m" in str(caught.value)
