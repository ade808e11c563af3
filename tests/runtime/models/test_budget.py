"""Model bindings and output budget resolution: the binding answers from the conversation
it is wired to, then from its own declarations."""

from __future__ import annotations

import weakref

import pytest

from parlour.runtime import (
    ConversationContext,
    Depth,
    Grade,
    IncomingMessage,
    ModelBinding,
    OutgoingMessage,
    OutputSize,
    ThinkingMode,
)
from parlour.runtime.errors import UncorrectableLLMError
from parlour.runtime.snapshots import decode_snapshot, encode_snapshot
from parlour.runtime.testing import fake_spec

SPEC = fake_spec()
CEILING = SPEC.max_output_tokens


def bound(
    output: OutputSize | int | None = None, depth: Depth | None = Depth.IMMEDIATE
) -> ConversationContext:
    c = ConversationContext("c-1")
    c.output_declaration = output
    c.depth = depth
    c.set_model_binding(ModelBinding.resolved(SPEC))
    return c


def seat(c: ConversationContext) -> ModelBinding:
    """The binding that answers for ``c`` (its own, else one wired to it, unattached)."""
    return ModelBinding.of(c)


def round_trip(c: ConversationContext) -> ConversationContext:
    return decode_snapshot(encode_snapshot(c.to_snapshot()), "c-1").to_conversation()


def test_set_model_binding_wires_both_ways() -> None:
    c = ConversationContext("c-1")
    b = ModelBinding(Grade.SMALL, Depth.IMMEDIATE, OutputSize.VERDICT)
    c.set_model_binding(b)
    assert c.model_binding is b
    assert b.conversation is c


def test_a_binding_holds_its_conversation_weakly() -> None:
    """The conversation holds its binding; the binding's way back is weak, so the pair is
    no reference cycle: dropping the conversation frees it at once."""
    c = ConversationContext("c-1")
    b = ModelBinding(Grade.SMALL, Depth.IMMEDIATE, OutputSize.VERDICT)
    c.set_model_binding(b)
    gone = weakref.ref(c)
    del c
    assert gone() is None
    assert b.conversation is None


def test_a_bound_conversation_survives_a_round_trip_unbound_with_its_spec_recorded() -> None:
    c = bound(depth=Depth.THOROUGH)
    c.grade = Grade.MEDIUM
    c.interactive = True
    restored = round_trip(c)
    assert (restored.grade, restored.depth, restored.interactive) == (
        Grade.MEDIUM,
        Depth.THOROUGH,
        True,
    )
    assert restored.prior_spec_id == SPEC.id
    assert restored.model_binding is None


def test_a_restored_conversation_is_unbound_and_carries_its_prior_spec_forward() -> None:
    restored = round_trip(bound(OutputSize.COMPACT))
    assert restored.model_binding is None
    with pytest.raises(UncorrectableLLMError, match=f"no resolved model .*served by {SPEC.id}"):
        seat(restored).get_model()
    assert restored.model_binding is None  # asking attached nothing
    assert restored.prior_spec_id == SPEC.id
    assert round_trip(restored).prior_spec_id == SPEC.id


def test_single_turn_is_bound_immediate_and_capped_at_the_backstop() -> None:
    c = ConversationContext.single_turn(SPEC, "extract the number", 900)
    binding = c.model_binding
    assert binding is not None and binding.is_resolved()
    assert binding.get_model().id == SPEC.id
    assert binding.resolve_depth() is Depth.IMMEDIATE
    assert len(c.messages) == 1
    assert c.messages[0].role == "user"
    assert "extract the number" in c.messages[0].raw_content
    assert binding.resolve_output_budget() == 900


def test_single_turn_conversations_are_distinct() -> None:
    first = ConversationContext.single_turn(SPEC, "a", 900)
    second = ConversationContext.single_turn(SPEC, "b", 900)
    assert first is not second
    first.messages[0].requested_output_tokens = CEILING
    assert seat(first).resolve_output_budget() == CEILING
    assert seat(second).resolve_output_budget() == 900


def test_nothing_declared_is_an_error_naming_the_seat() -> None:
    c = bound(output=None, depth=None)
    with pytest.raises(UncorrectableLLMError, match="declares no output size") as caught:
        seat(c).resolve_output_budget()
    assert "c-1" in str(caught.value)
    assert "Agent(..., output=OutputSize.STANDARD)" in str(caught.value)  # what to do
    with pytest.raises(UncorrectableLLMError, match="declares no depth") as caught:
        seat(c).resolve_depth()
    assert "Agent(..., depth=Depth.IMMEDIATE)" in str(caught.value)


def test_a_rung_translates_through_the_spec_and_a_count_stands() -> None:
    rung, count = bound(OutputSize.COMPACT), bound(9_000)
    assert seat(rung).resolve_output_budget() == SPEC.get_output_budget(OutputSize.COMPACT)
    assert seat(count).resolve_output_budget() == 9_000


def test_the_binding_declaration_is_the_last_layer() -> None:
    c = ConversationContext("c-1")
    c.set_model_binding(ModelBinding(Grade.SMALL, Depth.IMMEDIATE, OutputSize.VERDICT, spec=SPEC))
    assert seat(c).resolve_output_budget() == SPEC.get_output_budget(OutputSize.VERDICT)
    assert seat(c).resolve_depth() is Depth.IMMEDIATE


def test_the_last_outgoing_message_overrides_the_declaration() -> None:
    c = bound(OutputSize.COMPACT)
    c.add_message(OutgoingMessage("go", requested_output_tokens=32_000))
    assert seat(c).resolve_output_budget() == 32_000


def test_only_the_last_outgoing_message_counts() -> None:
    c = bound(OutputSize.COMPACT)
    c.add_message(OutgoingMessage("a", requested_output_tokens=4_000))
    c.add_message(OutgoingMessage("b", requested_output_tokens=64_000))
    assert seat(c).resolve_output_budget() == 64_000


def test_an_incoming_last_message_leaves_the_declaration_answering() -> None:
    c = bound(OutputSize.COMPACT)
    c.add_message(OutgoingMessage("a", requested_output_tokens=32_000))
    c.add_message(IncomingMessage("answer"))
    assert seat(c).resolve_output_budget() == SPEC.get_output_budget(OutputSize.COMPACT)


@pytest.mark.parametrize("declaration", [4 * CEILING, OutputSize.MAX])
def test_anything_above_the_ceiling_resolves_to_the_ceiling(
    declaration: OutputSize | int,
) -> None:
    c = bound(declaration)
    assert seat(c).resolve_output_budget() == CEILING


def test_an_override_above_the_ceiling_is_capped() -> None:
    c = bound(OutputSize.COMPACT)
    c.add_message(OutgoingMessage("a", requested_output_tokens=CEILING + 1))
    assert seat(c).resolve_output_budget() == CEILING


def test_raising_the_sent_message_to_the_ceiling_moves_the_budget() -> None:
    c = bound(OutputSize.COMPACT)
    sent = c.add_user_message("go")
    assert seat(c).resolve_output_budget() == SPEC.get_output_budget(OutputSize.COMPACT)
    sent.requested_output_tokens = CEILING
    assert seat(c).resolve_output_budget() == CEILING


def test_output_reserve_books_thinking_above_immediate_in_anthropic_mode() -> None:
    compact = SPEC.get_output_budget(OutputSize.COMPACT)
    conversations = [
        bound(OutputSize.COMPACT),
        bound(OutputSize.COMPACT, Depth.STANDARD),
        bound(OutputSize.MAX, Depth.ULTRA_THOROUGH),
    ]  # held: a binding reaches its conversation weakly
    immediate, standard, ultra = map(seat, conversations)
    assert immediate.output_reserve(SPEC) == compact
    assert standard.output_reserve(SPEC) == min(
        compact + SPEC.get_thinking_budget(Depth.STANDARD), CEILING
    )
    assert ultra.output_reserve(SPEC) == CEILING


def test_output_reserve_books_thinking_at_immediate_in_reasoning_effort_mode() -> None:
    effort = fake_spec(thinking_mode=ThinkingMode.REASONING_EFFORT)
    c = bound(OutputSize.COMPACT)
    assert seat(c).output_reserve(effort) == effort.get_output_budget(
        OutputSize.COMPACT
    ) + effort.get_thinking_budget(Depth.IMMEDIATE)


def test_output_reserve_works_unbound_on_the_spec_given_and_binds_nothing() -> None:
    c = ConversationContext("c-1")
    c.output_declaration = OutputSize.STANDARD
    c.depth = Depth.IMMEDIATE
    assert seat(c).output_reserve(SPEC) == SPEC.get_output_budget(OutputSize.STANDARD)
    assert c.model_binding is None


def test_an_unwired_binding_answers_from_its_own_declarations_alone() -> None:
    b = ModelBinding(Grade.SMALL, Depth.STANDARD, OutputSize.COMPACT, spec=SPEC)
    assert b.conversation is None
    assert b.resolve_output_budget() == SPEC.get_output_budget(OutputSize.COMPACT)
    assert b.resolve_depth() is Depth.STANDARD
    with pytest.raises(UncorrectableLLMError, match="wired to no conversation"):
        ModelBinding(spec=SPEC).resolve_output_budget()


def test_an_unbound_conversation_has_no_model_and_no_budget() -> None:
    c = ConversationContext("c-1")
    c.output_declaration = OutputSize.STANDARD
    assert not seat(c).is_resolved()
    with pytest.raises(UncorrectableLLMError):
        seat(c).get_model()
    with pytest.raises(UncorrectableLLMError):
        seat(c).resolve_output_budget()
    c.set_model_binding(ModelBinding(Grade.MEDIUM))
    assert not seat(c).is_resolved()
