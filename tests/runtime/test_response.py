"""The normalized response: usage shapes and cache metrics."""

from __future__ import annotations

import pytest

from parlour.runtime import ConversationContext, LLMResponse, Message, Usage
from parlour.runtime.testing import ScriptedClient


def response(**usage: int | None) -> LLMResponse:
    return LLMResponse(model_id="m", blocks=[], usage=Usage(**usage))  # type: ignore[arg-type]


def test_the_hit_rate_is_reads_over_all_cache_traffic() -> None:
    r = response(cache_creation_input_tokens=1000, cache_read_input_tokens=3000)
    assert r.get_cache_hit_rate() == 0.75
    assert r.has_cache()


@pytest.mark.parametrize(
    ("creation", "read", "has", "rate"),
    [(None, None, False, 0.0), (0, 0, False, 0.0), (None, 500, True, 1.0), (500, None, True, 0.0)],
)
def test_cache_edges(creation: int | None, read: int | None, has: bool, rate: float) -> None:
    r = response(cache_creation_input_tokens=creation, cache_read_input_tokens=read)
    assert r.has_cache() is has
    assert r.get_cache_hit_rate() == rate


def test_additive_usage_adds_the_cache_counters() -> None:
    r = response()
    r.set_additive_usage(100, 20, 30, 5)
    assert r.actual_input_tokens == 150
    assert (r.cache_creation_input_tokens, r.cache_read_input_tokens, r.output_tokens) == (
        20,
        30,
        5,
    )


def test_subset_usage_does_not_add_the_cached_count_again() -> None:
    r = response()
    r.set_usage(150, None, 30, 5)
    assert r.actual_input_tokens == 150
    assert r.cache_read_input_tokens == 30


def test_reported_usage_never_lands_on_the_conversation() -> None:
    c = ConversationContext("u-1")
    c.add_user_message("hello there")
    total = getattr(c, "get_total_tokens", None)
    before = total(ScriptedClient().spec) if total else None
    answer = LLMResponse(model_id="scripted", blocks=[], usage=Usage(input_tokens=987_654))
    reply = ScriptedClient([answer]).respond(c)
    c.add_message(reply.to_message())
    assert "987654" not in repr(vars(c)) + repr([vars_of(m) for m in c.messages])
    if total is not None:
        c.messages.pop()
        assert total(ScriptedClient().spec) == before


def vars_of(message: Message) -> dict[str, object]:
    names = [n for cls in type(message).__mro__ for n in getattr(cls, "__slots__", ())]
    return {name: getattr(message, name) for name in names if hasattr(message, name)}
