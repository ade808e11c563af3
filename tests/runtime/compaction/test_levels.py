"""Each rung of the ladder: what it rewrites, what it keeps, and how it fails."""

from __future__ import annotations

import asyncio
import re

import msgspec
import pytest

from parlour.runtime import (
    Artifact,
    CompactionLevel,
    ContextWindowManager,
    LLMContextCompactor,
    OfflineCompactor,
    OutputSize,
    ScriptedClient,
    Transcript,
    summary_model,
    type_alias,
)
from parlour.runtime.blocks import TextBlock, ToolDefinitionBlock, ToolResultBlock
from parlour.runtime.compaction import CONVERSATION_SUMMARY_HEADER, EXCHANGE_SUMMARY_HEADER
from parlour.runtime.errors import IllegalStateError, UncorrectableLLMError
from parlour.runtime.testing import fake_spec

from .conftest import Canned, ask, call, long_chat, prose, result, six_message_chat

LEVELS = list(CompactionLevel)
BELOW_MAXIMUM = LEVELS[:-1]


def targets(prompts: list[str]) -> list[int]:
    return [int(re.search(r"at most about (\d+) words", p).group(1)) for p in prompts]  # type: ignore[union-attr]


class Boom(RuntimeError):
    pass


def failing(prompt: str) -> str:
    raise Boom("the summary model is down")


# -- LIGHT --------------------------------------------------------------------------------------


def test_light_replaces_only_tool_results_and_keeps_the_count_and_the_protected_instances() -> None:
    c = six_message_chat()
    before = list(c.messages)
    result_ = LLMContextCompactor(Canned()).compact(c, CompactionLevel.LIGHT)
    assert len(c.messages) == len(before) == result_.messages_after
    assert result_.replaced == 1
    for old, new in zip(before, c.messages, strict=True):
        if not any(isinstance(b, ToolResultBlock) for b in old.blocks):
            assert new is old
    (rewritten,) = [new for old, new in zip(before, c.messages, strict=True) if new is not old]
    (block,) = rewritten.blocks
    assert isinstance(block, ToolResultBlock) and block.tool_use_id == "toolu_1"
    assert "canned summary" in block.content and len(block.content) < 200
    assert (
        c.messages[0] is before[0] and c.messages[3] is before[3] and c.messages[-1] is before[-1]
    )


def test_light_leaves_short_tool_results_and_the_latest_outgoing_result_alone() -> None:
    c = six_message_chat()
    c.add_message(call("toolu_2"))
    c.add_message(result("toolu_2", prose(400)))  # the latest outgoing message
    latest = c.messages[-1]
    LLMContextCompactor(Canned(), min_result_chars=10_000).compact(c, CompactionLevel.LIGHT)
    assert c.messages[2].blocks[0].content == prose(400)  # type: ignore[union-attr]
    LLMContextCompactor(Canned()).compact(c, CompactionLevel.LIGHT)
    assert c.messages[-1] is latest
    assert "canned summary" in c.messages[2].blocks[0].content  # type: ignore[union-attr]


# -- MODERATE -----------------------------------------------------------------------------------


def test_moderate_turns_each_earlier_exchange_into_one_summary_the_older_the_shorter() -> None:
    c = long_chat(8)
    latest = c.messages[-1]
    canned = Canned()
    LLMContextCompactor(canned).compact(c, CompactionLevel.MODERATE)
    assert len(c.messages) == 9 and c.messages[-1] is latest
    assert all(m.raw_content.startswith(EXCHANGE_SUMMARY_HEADER) for m in c.messages[:-1])
    assert all(m.role == "user" and m.app_authored for m in c.messages[:-1])
    wanted = targets(canned.prompts)  # oldest exchange first
    assert len(wanted) == 8 and wanted == sorted(wanted) and wanted[0] < wanted[-1]


def test_moderate_keeps_non_compactable_messages_inside_an_exchange_and_the_latest_exchange() -> (
    None
):
    c = six_message_chat()
    c.add_message(answer_text := call("toolu_9"))
    c.add_message(result("toolu_9", prose(300)))
    protected = [c.messages[0], c.messages[3]]
    LLMContextCompactor(Canned()).compact(c, CompactionLevel.MODERATE)
    assert [m for m in c.messages if m in protected] == protected
    assert answer_text in c.messages  # the latest exchange is untouched below AGGRESSIVE


# -- AGGRESSIVE ---------------------------------------------------------------------------------


def test_aggressive_leaves_the_protected_messages_one_user_summary_and_the_latest_last() -> None:
    c = six_message_chat()
    first, answer, latest = c.messages[0], c.messages[3], c.messages[-1]
    LLMContextCompactor(Canned()).compact(c, CompactionLevel.AGGRESSIVE)
    assert len(c.messages) == 4
    assert c.messages[0] is first and c.messages[2] is answer and c.messages[3] is latest
    summary = c.messages[1]
    assert summary.role == "user" and CONVERSATION_SUMMARY_HEADER in summary.raw_content
    assert CONVERSATION_SUMMARY_HEADER in Transcript.render(c)


def test_from_aggressive_a_latest_outgoing_tool_result_gets_a_summary_of_its_own() -> None:
    c = long_chat(3)
    c.messages.pop()  # end mid-turn: the model called a tool and its long result is last
    c.add_message(calling := call("toolu_last"))
    c.add_message(result("toolu_last", prose(2_000)))
    LLMContextCompactor(Canned()).compact(c, CompactionLevel.AGGRESSIVE)
    assert c.messages[-2] is calling  # the call stays, so its result is no orphan
    (block,) = c.messages[-1].blocks
    assert isinstance(block, ToolResultBlock) and block.tool_use_id == "toolu_last"
    assert "canned summary" in block.content


# -- MAXIMUM ------------------------------------------------------------------------------------


def test_maximum_fits_a_conversation_that_aggressive_leaves_too_large() -> None:
    probe, measure = long_chat(20, cid="probe"), ContextWindowManager(fake_spec()).measure
    for level in LEVELS[:3]:  # the ladder's own climb, on a copy
        OfflineCompactor().compact(probe, level)
    aggressive = measure(probe)
    OfflineCompactor().compact(probe, CompactionLevel.MAXIMUM)
    maximum = measure(probe)
    assert maximum * 2 < aggressive  # the last rung frees far more than the one before
    reserve = fake_spec().get_output_budget(OutputSize.COMPACT)
    spec = fake_spec(max_context_tokens=(aggressive + maximum) // 2 + reserve)
    c = long_chat(20)
    report = ContextWindowManager(spec, compactor=OfflineCompactor()).fit(c)
    assert report.levels == tuple(LEVELS)
    aggressive_step = report.steps[2]
    assert aggressive_step.tokens_after > report.absolute_limit >= report.tokens_after
    assert report.tokens_after == maximum


def test_maximum_passes_over_its_own_summary_when_it_came_back_too_long() -> None:
    replies = iter([prose(2_000), "short"])
    prompts: list[str] = []

    def complete(prompt: str) -> str:
        prompts.append(prompt)
        return next(replies)

    c = long_chat(6)
    LLMContextCompactor(complete).compact(c, CompactionLevel.MAXIMUM)
    assert len(prompts) == 2 and "Shorten this summary" in prompts[1]
    assert c.messages[0].raw_content == f"{CONVERSATION_SUMMARY_HEADER}\nshort"


# -- discipline ---------------------------------------------------------------------------------


@pytest.mark.parametrize("level", BELOW_MAXIMUM)
def test_below_maximum_a_failing_summarizer_leaves_every_message_as_it_was(
    level: CompactionLevel,
) -> None:
    c = long_chat(4)
    c.messages.pop()
    c.add_message(call("toolu_last"))
    c.add_message(result("toolu_last", prose(2_000)))
    before = list(c.messages)
    outcome = LLMContextCompactor(failing).compact(c, level)
    assert c.messages == before and all(a is b for a, b in zip(c.messages, before, strict=True))
    assert not outcome.changed and outcome.error is not None and "down" in outcome.error


def test_at_maximum_a_failing_summarizer_raises_the_very_same_exception() -> None:
    raised = Boom("the summary model is down")

    def complete(prompt: str) -> str:
        raise raised

    c = long_chat(4)
    before = list(c.messages)
    with pytest.raises(Boom) as caught:
        LLMContextCompactor(complete).compact(c, CompactionLevel.MAXIMUM)
    assert caught.value is raised and c.messages == before


def test_through_the_manager_a_failure_at_maximum_propagates_as_the_same_object() -> None:
    raised = Boom("down")
    calls: list[str] = []

    def complete(prompt: str) -> str:
        calls.append(prompt)
        raise raised

    spec = fake_spec(max_context_tokens=1_000)
    manager = ContextWindowManager(spec, compactor=LLMContextCompactor(complete))
    with pytest.raises(Boom) as caught:
        manager.ensure_fits(long_chat(4))
    assert caught.value is raised and len(calls) >= 4  # every rung was tried first


@pytest.mark.parametrize("blank", ["", "   \n", None])
def test_a_blank_or_missing_summary_is_an_uncorrectable_error(blank: str | None) -> None:
    c = long_chat(4)
    before = list(c.messages)
    with pytest.raises(UncorrectableLLMError, match="blank summary"):
        LLMContextCompactor(lambda prompt: blank).compact(c, CompactionLevel.MAXIMUM)
    outcome = LLMContextCompactor(lambda prompt: blank).compact(c, CompactionLevel.LIGHT)
    assert c.messages == before and "blank summary" in (outcome.error or "")


def test_an_interrupt_is_never_swallowed_even_below_maximum() -> None:
    def interrupted(prompt: str) -> str:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        LLMContextCompactor(interrupted).compact(long_chat(2), CompactionLevel.LIGHT)


@type_alias("cmp:site")
class SiteArtifact(Artifact):
    name: str


@pytest.mark.parametrize("level", LEVELS)
def test_compaction_never_changes_the_registry_count_the_objective_or_the_declared_tools(
    level: CompactionLevel,
) -> None:
    c = long_chat(5)
    ref = c.artifact_registry.register(SiteArtifact(name="north"))
    c.add_tool(ToolDefinitionBlock(name="search", description="Search", schema_json="{}"))
    c.messages[2].blocks.append(TextBlock(text=f"See {ref} for the site."))
    objective, tools = c.get_main_objective(), c.declared_tools()
    OfflineCompactor().compact(c, level)
    assert c.artifact_registry.size() == 1
    assert c.get_main_objective() == objective and c.declared_tools() == tools
    assert any(ref in m.raw_content or ref in Transcript.render_message(m) for m in c.messages)


def test_a_non_compactable_conversation_is_never_compacted() -> None:
    c = long_chat(4)
    c.set_compactable(False)
    before = list(c.messages)
    for level in LEVELS:
        assert not OfflineCompactor().compact(c, level).changed
    assert c.messages == before


# -- prompts ------------------------------------------------------------------------------------


def test_every_summary_prompt_preserves_artifact_references_and_states_its_levels_goal() -> None:
    goals = {}
    for level in LEVELS:
        canned = Canned()
        c = long_chat(6)
        c.messages.pop()
        c.add_message(call("toolu_last"))
        c.add_message(result("toolu_last", prose(2_000)))
        LLMContextCompactor(canned).compact(c, level)
        assert canned.prompts
        assert all("Preserve any artifact references" in p for p in canned.prompts)
        goals[level] = re.search(r"^Goal: (.*)$", canned.prompts[0], re.M).group(1)  # type: ignore[union-attr]
    assert len(set(goals.values())) == len(LEVELS)


# -- models, usage and concurrency ----------------------------------------------------------------


def test_the_summary_model_is_the_smallest_grade_of_the_conversations_provider() -> None:
    from parlour.runtime import ModelCatalog

    catalog = ModelCatalog.default()
    assert summary_model(catalog.get("claude-opus-4-5")).id == "claude-haiku-4-5"
    assert summary_model(catalog.get("gpt-5")).id == "gpt-5-nano"
    scripted = catalog.get("scripted")
    assert summary_model(scripted) is scripted  # no graded scripted model: itself


def test_summaries_through_a_client_report_each_calls_usage() -> None:
    client = ScriptedClient(["first summary", "second summary", "third summary"])
    compactor = LLMContextCompactor.for_client(client)
    c = long_chat(3)
    outcome = compactor.compact(c, CompactionLevel.LIGHT)
    assert len(outcome.calls) == 3
    assert all(call_.usage is not None and call_.usage.input_tokens > 0 for call_ in outcome.calls)
    assert all(call_.model_id == "scripted" for call_ in outcome.calls)


def test_acompact_makes_the_summaries_of_one_level_concurrently() -> None:
    exchanges = 6

    async def scenario() -> int:
        in_flight = 0
        everyone = asyncio.Event()

        async def acomplete(prompt: str) -> str:
            nonlocal in_flight
            in_flight += 1
            if in_flight == exchanges:
                everyone.set()
            await asyncio.wait_for(everyone.wait(), timeout=5)  # only all together finish
            return "summary"

        c = long_chat(exchanges)
        outcome = await LLMContextCompactor(acomplete=acomplete).acompact(
            c, CompactionLevel.MODERATE
        )
        assert outcome.error is None and outcome.changed
        return len(c.messages)

    assert asyncio.run(scenario()) == exchanges + 1


def test_the_manager_awaits_an_async_compactor_rung_by_rung() -> None:
    async def acomplete(prompt: str) -> str:
        return "summary"

    spec = fake_spec(max_context_tokens=6_000)
    manager = ContextWindowManager(spec, compactor=LLMContextCompactor(acomplete=acomplete))
    report = asyncio.run(manager.afit(long_chat(6)))
    assert report.compacted and report.tokens_after <= report.absolute_limit


def test_a_compactor_without_a_summarizer_or_on_the_wrong_side_is_refused() -> None:
    async def acomplete(prompt: str) -> str:
        return "summary"

    with pytest.raises(ValueError, match="complete or an acomplete"):
        LLMContextCompactor()
    with pytest.raises(IllegalStateError, match="use acompact"):
        LLMContextCompactor(acomplete=acomplete).compact(long_chat(1), CompactionLevel.LIGHT)
    with pytest.raises(IllegalStateError, match="use compact"):
        asyncio.run(LLMContextCompactor(Canned()).acompact(long_chat(1), CompactionLevel.LIGHT))


def test_the_offline_compactor_is_deterministic() -> None:
    first, second = long_chat(5), long_chat(5)
    OfflineCompactor().compact(first, CompactionLevel.AGGRESSIVE)
    OfflineCompactor().compact(second, CompactionLevel.AGGRESSIVE)
    assert Transcript.render(first) == Transcript.render(second)
    assert msgspec.json.encode(first.to_snapshot().messages) == msgspec.json.encode(
        second.to_snapshot().messages
    )


def test_an_agent_compacts_offline_on_the_scripted_model_and_on_the_small_model_otherwise() -> None:
    from parlour.runtime import ModelCatalog
    from parlour.runtime.compaction import compactor_for
    from parlour.runtime.providers import AnthropicClient
    from parlour.runtime.testing import MockProvider, anthropic_message, mock_anthropic_sdk

    assert type(compactor_for(ScriptedClient())) is OfflineCompactor
    replies = [
        anthropic_message(f"summary {n}", model="claude-haiku-4-5", input_tokens=900 + n)
        for n in range(3)
    ]
    handler = MockProvider(*replies)
    sonnet = ModelCatalog.default().get("claude-sonnet-4-5")
    client = AnthropicClient(sonnet, client=mock_anthropic_sdk(handler))
    outcome = compactor_for(client).compact(long_chat(3), CompactionLevel.LIGHT)
    assert [body["model"] for body in handler.bodies] == ["claude-haiku-4-5"] * 3
    assert all(
        "Preserve any artifact references" in str(body["messages"]) for body in handler.bodies
    )
    assert [c.usage.input_tokens for c in outcome.calls if c.usage] == [900, 901, 902]
    assert {c.model_id for c in outcome.calls} == {"claude-haiku-4-5"}


def test_a_compaction_is_logged_with_its_level_and_tokens_before_and_after() -> None:
    from loguru import logger

    records: list[dict[str, object]] = []
    sink = logger.add(lambda m: records.append(m.record), level="INFO")  # type: ignore[arg-type]
    logger.enable("parlour")
    try:
        manager = ContextWindowManager(
            fake_spec(), comfort_override=500, compactor=OfflineCompactor()
        )
        report = manager.fit(long_chat(4, cid="logged"))
    finally:
        logger.disable("parlour")
        logger.remove(sink)
    lines = [str(r["message"]) for r in records if r["extra"] == {"conversation_id": "logged"}]
    step = report.steps[0]
    assert any(
        line.startswith(
            f"Compaction at {step.level.value}: {step.tokens_before} -> {step.tokens_after}"
        )
        for line in lines
    )


def test_the_async_climb_runs_a_compactor_built_on_a_sync_call_as_it_is() -> None:
    canned = Canned()
    manager = ContextWindowManager(
        fake_spec(max_context_tokens=6_000), compactor=LLMContextCompactor(canned)
    )
    report = asyncio.run(manager.afit(long_chat(6)))
    assert report.compacted and canned.prompts


@pytest.mark.parametrize("level", LEVELS)
def test_the_frameworks_announcements_in_the_stream_survive_every_level(
    level: CompactionLevel,
) -> None:
    from parlour.runtime.blocks import SkillBlock

    c = long_chat(4)
    c.prepare_messages_for_llm()  # the head freezes: what comes later arrives in the stream
    c.admit_skill(SkillBlock(name="survey-rules", body="Cite the site of every reading."))
    c.add_tool(ToolDefinitionBlock(name="late_tool", description="Arrives late", schema_json="{}"))
    c.prepare_messages_for_llm()  # announces the late tool as an app-authored message
    c.add_message(ask("And now?"))
    announcements = [m for m in c.messages if m.app_authored]
    assert len(announcements) == 2
    OfflineCompactor().compact(c, level)
    assert [m for m in c.messages if any(m is a for a in announcements)] == announcements
    count = len(c.messages)
    prepared = c.prepare_messages_for_llm()
    assert prepared.skills == [] and len(c.messages) == count  # nothing said twice
