"""The shared template's truncation and refusal discipline, offline."""

from __future__ import annotations

import pytest

from parlour.runtime import (
    ConversationContext,
    Depth,
    LLMResponse,
    ModelBinding,
    OutputSize,
    PreparedConversation,
    StopReason,
    Usage,
    WireRequest,
    respond_with_truncation_retry,
)
from parlour.runtime.blocks import TextBlock
from parlour.runtime.errors import (
    IllegalStateError,
    OutputCeilingError,
    OutputTruncationRetry,
    ProviderRefusalError,
    UncorrectableLLMError,
)
from parlour.runtime.testing import ScriptedClient, fake_spec

SPEC = fake_spec()
CEILING = SPEC.max_output_tokens


def conversation(output: OutputSize | int = 16_000, spec=SPEC) -> ConversationContext:  # type: ignore[no-untyped-def]
    c = ConversationContext("t-1")
    c.output_declaration = output
    c.depth = Depth.IMMEDIATE
    c.set_model_binding(ModelBinding.resolved(spec))
    c.add_user_message("Write the whole report.")
    return c


def answer(stop: StopReason, output_tokens: int = 10, **fields: str) -> LLMResponse:
    return LLMResponse(
        model_id=SPEC.id,
        blocks=[TextBlock(text="partial")],
        stop_reason=stop,
        usage=Usage(input_tokens=5, output_tokens=output_tokens),
        **fields,  # type: ignore[arg-type]
    )


def test_a_truncated_answer_escalates_the_sent_message_to_the_ceiling() -> None:
    c = conversation(16_000)
    with pytest.raises(OutputTruncationRetry) as caught:
        ScriptedClient([answer(StopReason.MAX_TOKENS)]).respond(c)
    assert caught.value.previous_budget == 16_000
    assert caught.value.new_budget == CEILING
    assert c.messages[-1].requested_output_tokens == CEILING


def test_a_truncation_at_the_ceiling_is_final_and_names_it() -> None:
    c = conversation(16_000)
    c.messages[-1].requested_output_tokens = CEILING
    with pytest.raises(UncorrectableLLMError, match=str(CEILING)) as caught:
        ScriptedClient([answer(StopReason.MAX_TOKENS)]).respond(c)
    assert not isinstance(caught.value, OutputTruncationRetry)
    assert isinstance(caught.value, OutputCeilingError)


def test_a_ceiling_below_the_declaration_truncates_finally_on_the_first_call() -> None:
    low = fake_spec(max_output_tokens=8_000)
    c = conversation(16_000, low)
    with pytest.raises(UncorrectableLLMError, match="8000"):
        ScriptedClient([answer(StopReason.MAX_TOKENS)]).respond(c)


def test_an_unknown_stop_that_fills_the_wire_maximum_is_a_truncation() -> None:
    with pytest.raises(OutputTruncationRetry):
        ScriptedClient([answer(StopReason.UNKNOWN, 16_000)]).respond(conversation(16_000))
    response = ScriptedClient([answer(StopReason.UNKNOWN, 15_999)]).respond(conversation(16_000))
    assert response.stop_reason is StopReason.UNKNOWN


def test_the_retry_helper_sends_the_escalated_budget_once() -> None:
    sent: list[WireRequest] = []
    client = ScriptedClient([answer(StopReason.MAX_TOKENS), "done"], requests=sent)
    response = respond_with_truncation_retry(client, conversation(16_000))
    assert response.text == "done"
    assert [r.max_tokens for r in sent] == [16_000, CEILING]


def test_a_second_truncation_names_the_models_own_ceiling() -> None:
    client = ScriptedClient([answer(StopReason.MAX_TOKENS), answer(StopReason.MAX_TOKENS)])
    with pytest.raises(UncorrectableLLMError, match="own ceiling refused") as caught:
        respond_with_truncation_retry(client, conversation(16_000))
    assert str(CEILING) in str(caught.value)


def test_a_second_truncation_of_a_rebuilt_request_says_the_escalation_was_lost() -> None:
    # A job that rebuilds its conversation per call re-runs at its declared budget.
    client = ScriptedClient([answer(StopReason.MAX_TOKENS), answer(StopReason.MAX_TOKENS)])
    with pytest.raises(UncorrectableLLMError, match="without the escalation"):
        respond_with_truncation_retry(client, lambda: conversation(16_000))


def test_a_second_truncation_after_failover_names_the_lower_ceiling() -> None:
    kept = conversation(16_000)
    calls = iter([False, True])

    def attempt() -> ConversationContext:
        if next(calls):  # the picker moved the retry to a model with a lower ceiling
            kept.set_model_binding(ModelBinding.resolved(fake_spec(max_output_tokens=20_000)))
        return kept

    client = ScriptedClient([answer(StopReason.MAX_TOKENS), answer(StopReason.MAX_TOKENS)])
    with pytest.raises(UncorrectableLLMError, match="failover") as caught:
        respond_with_truncation_retry(client, attempt)
    assert "20000" in str(caught.value)


def test_a_refusal_carries_its_category_and_explanation() -> None:
    c = conversation()
    refusal = answer(
        StopReason.CONTENT_FILTERED,
        refusal_category="reasoning_extraction",
        refusal_explanation="This request was blocked",
    )
    with pytest.raises(ProviderRefusalError) as caught:
        ScriptedClient([refusal]).respond(c)
    error = caught.value
    assert (error.model_id, error.category, error.explanation) == (
        SPEC.id,
        "reasoning_extraction",
        "This request was blocked",
    )
    assert SPEC.id in str(error)
    assert "(reasoning_extraction)" in str(error)
    assert "This request was blocked" in str(error)
    assert isinstance(error, UncorrectableLLMError)
    assert len(c.messages) == 1


def test_a_refusal_without_an_account_says_so() -> None:
    with pytest.raises(ProviderRefusalError) as caught:
        ScriptedClient([answer(StopReason.CONTENT_FILTERED)]).respond(conversation())
    assert caught.value.category is None and caught.value.explanation is None
    assert "refused" in str(caught.value) and "gave no account" in str(caught.value)


def test_a_successful_response_is_timed() -> None:
    response = ScriptedClient(["fine"]).respond(conversation())
    assert response.end_time is not None and response.start_time is not None
    assert response.end_time >= response.start_time


def test_the_wire_maximum_is_the_output_reserve() -> None:
    sent: list[WireRequest] = []
    c = conversation(OutputSize.COMPACT)
    c.depth = Depth.STANDARD
    ScriptedClient(requests=sent).respond(c)
    assert sent[0].max_tokens == ModelBinding.of(c).output_reserve(SPEC) == 4_000 + 8_000
    assert sent[0].thinking_active


def test_an_unbound_undeclared_conversation_gets_the_scripted_default_binding() -> None:
    c = ConversationContext("t-2")
    c.add_user_message("hi")
    response = ScriptedClient().respond(c)
    assert response.requested_output_tokens == 16_000
    assert c.model_binding is not None and c.model_binding.is_resolved()


def test_a_client_without_defaults_refuses_an_undeclared_seat() -> None:
    c = ConversationContext("t-3")
    c.add_user_message("hi")
    client = ScriptedClient(depth=Depth.IMMEDIATE, output_declaration=None)
    with pytest.raises(UncorrectableLLMError, match="declares no output size"):
        client.respond(c)


def test_a_streamed_answer_arrives_in_pieces_and_ends_in_the_same_response() -> None:
    pieces: list[str] = []
    response = ScriptedClient(["one two three"]).respond(conversation(), on_text=pieces.append)
    assert pieces == ["one", " two", " three"]
    assert response.text == "one two three"
    stream = ScriptedClient(["four five"]).stream(conversation())
    with pytest.raises(IllegalStateError):
        _ = stream.response
    assert list(stream) == ["four", " five"]
    assert stream.response.text == "four five"


def test_a_streamed_truncation_raises_at_the_end_of_the_stream() -> None:
    stream = ScriptedClient([answer(StopReason.MAX_TOKENS)]).stream(conversation(16_000))
    with pytest.raises(OutputTruncationRetry):
        stream.get_final_response()


def test_a_prefix_change_is_logged_with_the_first_differing_slot() -> None:
    c = conversation()
    client = ScriptedClient()
    client.respond(c)
    c.add_message(ScriptedClient().respond(c).to_message())
    c.add_user_message("more")
    client.respond(c)
    assert client.prefix_monitor.check(SPEC.id, "t-1", _prepared_like(c)) == "turn 1 (user)"


def _prepared_like(c: ConversationContext) -> PreparedConversation:
    prepared = c.prepare_messages_for_llm()
    first = prepared.turns[0]
    edited = type(first)(role=first.role, blocks=[TextBlock(text="rewritten")])
    return PreparedConversation(
        system_text=prepared.system_text, turns=[edited, *prepared.turns[1:]]
    )
