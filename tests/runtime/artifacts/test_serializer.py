"""The transformation pipeline, summaries and the registry dump."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Annotated, Any

import msgspec
import pytest
from loguru import logger

from parlour.runtime import (
    REGISTRY_GUIDANCE,
    Artifact,
    ArtifactRegistry,
    ConversationContext,
    ListArtifact,
    LLMContextIgnore,
    LLMSummarizable,
    LLMSummarizer,
    OutgoingMessage,
    SummarySize,
    TruncatingSummarizer,
    TurnRole,
    build_registry_section,
    read_artifact,
    type_alias,
    write_plain,
    write_summarized,
    write_summarized_with_refs,
)
from parlour.runtime.blocks import (
    ContentBlock,
    FileBlock,
    ImageBlock,
    JsonBlock,
    PojoBlock,
    TextBlock,
    ThinkingBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from parlour.runtime.snapshots import decode_snapshot, encode_snapshot


@type_alias("link:cite")
class CitationArtifact(Artifact):
    title: str
    abstract: Annotated[str, LLMSummarizable("paper abstract", threshold=100)] = ""


@type_alias("ser:page")
class WebPageArtifact(Artifact):
    url: str
    content: Annotated[str, LLMSummarizable("web page content", threshold=1000)] = ""
    raw_html: Annotated[str, LLMContextIgnore] = ""


class Finding(msgspec.Struct):
    summary: str
    citation: CitationArtifact


class Notes(msgspec.Struct):
    body: Annotated[str, LLMSummarizable("notes", threshold=100)] = ""


class Counting:
    """A summarizer that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def summarize(self, text: str, hint: LLMSummarizable | None) -> str:
        self.calls += 1
        return f"[SUMMARY: {len(text)} chars] counted"


def _pojo_conversation(value: object) -> ConversationContext:
    c = ConversationContext("c1")
    c.add_message(OutgoingMessage(None, [PojoBlock(value=value)]))
    return c


def test_a_pojo_block_renders_as_json_without_rewriting_the_message() -> None:
    c = _pojo_conversation(Notes(body="short"))
    turn = c.prepare_messages_for_llm().turns[0]
    assert turn.blocks == [JsonBlock(json='{"body":"short"}')]
    assert isinstance(c.messages[0].blocks[0], PojoBlock)


def test_an_artifact_field_becomes_a_registered_ref() -> None:
    c = _pojo_conversation(Finding(summary="s", citation=CitationArtifact(title="T")))
    block = c.prepare_messages_for_llm().turns[0].blocks[0]
    assert isinstance(block, JsonBlock)
    ref = json.loads(block.json)["citation"]["@ref"]
    assert re.match(r"^«artifact:link:cite~[a-z0-9]{6}»$", ref)
    assert isinstance(c.artifact_registry.get(ref), CitationArtifact)


def test_other_blocks_pass_through_unchanged() -> None:
    blocks: list[ContentBlock] = [
        ToolDefinitionBlock(name="t", description="d", schema_json="{}"),
        ImageBlock(data="aGk=", mime_type="image/png"),
        FileBlock(data="aGk=", mime_type="application/pdf", filename="r.pdf"),
        ToolUseBlock(id="1", name="t", input_json="{}"),
        ToolResultBlock(tool_use_id="1", content="ok"),
        ThinkingBlock(text="hmm", signature="s"),
    ]
    c = ConversationContext("c")
    c.add_message(OutgoingMessage(None, blocks))
    assert c.prepare_messages_for_llm().turns[0].blocks == blocks


def test_a_long_summarizable_field_carries_its_original_length() -> None:
    text = "word " * 300
    out = json.loads(write_summarized(Notes(body=text)))
    assert out["body"].startswith(f"[SUMMARY: {len(text)} chars] ")


@pytest.mark.parametrize(
    ("size", "budget"),
    [(SummarySize.BRIEF, 200), (SummarySize.SHORT, 500), (SummarySize.PARAGRAPHS, 1200)],
)
def test_the_truncating_summarizer_keeps_its_budget_on_a_word_boundary(
    size: SummarySize, budget: int
) -> None:
    text = "alpha beta gamma delta " * 200
    out = TruncatingSummarizer().summarize(text, LLMSummarizable(size=size))
    prefix = f"[SUMMARY: {len(text)} chars] "
    assert out.startswith(prefix) and out.endswith("...")
    kept = out[len(prefix) : -3]
    assert len(kept) <= budget and text.startswith(kept)
    assert text[len(kept)] in " .,\n"  # cut on a word boundary


def test_the_truncating_summarizer_defaults_static_and_short_texts() -> None:
    summarizer = TruncatingSummarizer()
    text = "x " * 1000
    assert summarizer.summarize(text, None) == summarizer.summarize(text, LLMSummarizable())
    static = LLMSummarizable(static_summary="SMILES molecular notation")
    assert summarizer.summarize("C" * 12345, static) == (
        "[SUMMARY: 12345 chars] SMILES molecular notation"
    )
    assert summarizer.summarize("tiny", None) == "[SUMMARY: 4 chars] tiny"


def test_a_field_under_its_threshold_is_verbatim_and_never_summarized() -> None:
    counting = Counting()
    out = json.loads(write_summarized(Notes(body="short"), counting))
    assert out == {"body": "short"} and counting.calls == 0


def test_an_artifact_summary_is_computed_once_a_plain_struct_every_time() -> None:
    counting = Counting()
    cite = CitationArtifact(title="T", abstract="a" * 500)
    for _ in range(3):
        write_summarized(cite, counting)
    assert counting.calls == 1
    counting = Counting()
    notes = Notes(body="b" * 500)
    for _ in range(3):
        write_summarized(notes, counting)
    assert counting.calls == 3


def test_the_registry_dump_has_the_exact_format() -> None:
    registry = ArtifactRegistry()
    cite = CitationArtifact(title="T", artifact_ref="«artifact:link:cite~abc123»")
    registry.register(cite)
    expected = (
        "\n\n=== ARTIFACT REGISTRY ===\n"
        "Long text fields show summaries with original length. Use get_artifact_field(ref, "
        "fieldName) for full content. Use search_artifact_content(query) to search across all "
        "artifact text.\n\n"
        "--- «artifact:link:cite~abc123» ---\n"
        '{"title":"T","abstract":"","artifact_ref":"«artifact:link:cite~abc123»"}\n\n'
    )
    assert build_registry_section(registry) == expected
    assert REGISTRY_GUIDANCE in expected
    assert build_registry_section(ArtifactRegistry()) == ""


def test_a_huge_page_is_summarized_in_the_dump() -> None:
    registry = ArtifactRegistry()
    registry.register(WebPageArtifact(url="u", content="C" * 20_000))
    dump = build_registry_section(registry)
    assert "[SUMMARY:" in dump and "C" * 20_000 not in dump


def _pages(n: int) -> ListArtifact[WebPageArtifact]:
    return ListArtifact(items=[WebPageArtifact(url=f"u{i}") for i in range(n)])


def test_a_200_iterand_list_is_one_dump_entry() -> None:
    registry = ArtifactRegistry()
    registry.register(_pages(200))
    assert build_registry_section(registry).count("--- «artifact:list~") == 1


def test_a_list_summarizes_as_a_bounded_digest_at_every_level() -> None:
    registry = ArtifactRegistry()
    listing = _pages(5)
    registry.register(listing)
    digest = json.loads(write_summarized(listing))
    assert set(digest) == {"artifact_ref", "iterand_type", "count", "sample"}
    assert digest["iterand_type"] == "ser:page" and digest["count"] == 5
    assert [s["url"] for s in digest["sample"]] == ["u0", "u1", "u2"]
    nested: ListArtifact[ListArtifact[WebPageArtifact]] = ListArtifact(
        items=[_pages(50) for _ in range(50)]
    )
    registry.register(nested)
    outer = json.loads(write_summarized(nested))
    assert outer["count"] == 50 and len(outer["sample"]) == 3
    assert all(inner["count"] == 50 and len(inner["sample"]) == 3 for inner in outer["sample"])


class Holder(msgspec.Struct):
    pages: ListArtifact[WebPageArtifact]


def test_the_plain_write_keeps_every_iterand_and_refs_mode_keeps_none() -> None:
    listing = _pages(7)
    registry = ArtifactRegistry()
    plain = json.loads(write_plain(listing))
    assert len(plain["items"]) == 7
    refs = json.loads(write_summarized_with_refs(Holder(pages=listing), registry))
    assert list(refs["pages"]) == ["@ref"] and "url" not in json.dumps(refs)


def test_a_registered_list_round_trips_with_concrete_iterands() -> None:
    registry = ArtifactRegistry()
    listing = _pages(4)
    registry.register(listing)
    back = read_artifact(json.loads(write_plain(listing)))
    assert isinstance(back, ListArtifact)
    assert all(isinstance(i, WebPageArtifact) for i in back.items)
    assert [i.artifact_ref for i in back.items] == [i.artifact_ref for i in listing.items]
    assert back.artifact_ref == listing.artifact_ref


def test_a_list_whose_iterands_lack_refs_fails_on_read() -> None:
    data: dict[str, Any] = json.loads(write_plain(_pages(3)))
    data["artifact_ref"] = "«artifact:list~abc123»"
    with pytest.raises(ValueError, match="silently shortened"):
        read_artifact(data)


@pytest.fixture
def warnings_log() -> Iterator[list[str]]:
    records: list[str] = []
    logger.enable("parlour")
    sink = logger.add(lambda m: records.append(str(m)), level="WARNING", format="{message}")
    yield records
    logger.remove(sink)
    logger.disable("parlour")


def test_restore_skips_an_unknown_alias_with_a_warning(warnings_log: list[str]) -> None:
    c = ConversationContext("c")
    kept = CitationArtifact(title="kept")
    c.artifact_registry.register(kept)
    snapshot = c.to_snapshot()
    snapshot.artifacts.insert(0, {"artifact_ref": "«artifact:gone:type~abc123»", "x": 1})
    restored = decode_snapshot(encode_snapshot(snapshot), "c").to_conversation()
    assert list(restored.artifact_registry.get_all_artifacts()) == [kept.artifact_ref]
    assert restored.artifact_registry.get(kept.artifact_ref) == kept
    assert any("gone:type" in r for r in warnings_log)


def test_context_ignored_fields_leave_the_model_json_but_stay_in_the_plain_write() -> None:
    page = WebPageArtifact(url="u", raw_html="<html>")
    registry = ArtifactRegistry()
    registry.register(page)
    assert "raw_html" in write_plain(page)
    assert "raw_html" not in build_registry_section(registry)  # the dump is model-facing too

    class Carrier(msgspec.Struct):
        visible: str
        secret: Annotated[str, LLMContextIgnore] = ""

    assert json.loads(write_summarized_with_refs(Carrier("v", "s"), ArtifactRegistry())) == {
        "visible": "v"
    }
    assert json.loads(write_plain(Carrier("v", "s"))) == {"visible": "v", "secret": "s"}


def test_the_registry_rides_a_trailing_user_turn_never_cached() -> None:
    c = ConversationContext("c")
    c.put_main_objective("task", "Do the thing.")
    c.artifact_registry.register(CitationArtifact(title="T"))
    message = c.add_user_message("hello")
    message.set_cache(True)
    prepared = c.prepare_messages_for_llm()
    last = prepared.turns[-1]
    assert last.role is TurnRole.USER and not last.cache
    assert isinstance(last.blocks[0], TextBlock)
    assert "=== ARTIFACT REGISTRY ===" in last.blocks[0].text
    assert "=== ARTIFACT REGISTRY ===" not in prepared.system_text
    assert len(c.messages) == 1  # the dump is rendered, never stored


def test_an_empty_registry_adds_no_turn() -> None:
    c = ConversationContext("c")
    c.add_user_message("a")
    c.add_user_message("b")
    assert len(c.prepare_messages_for_llm().turns) == 2


def test_a_struct_slot_renders_through_the_pipeline() -> None:
    c = ConversationContext("c")
    c.put_main_objective("finding", Finding(summary="s", citation=CitationArtifact(title="T")))
    c.add_user_message("go")
    system = c.prepare_messages_for_llm().system_text
    assert '"citation":{"@ref":"«artifact:link:cite~' in system


def test_an_llm_summarizer_is_pluggable_and_falls_back_to_truncation() -> None:
    prompts: list[str] = []

    def complete(prompt: str) -> str:
        prompts.append(prompt)
        return "  A study of things.  "

    summarizer = LLMSummarizer(complete)
    text = "t " * 500
    assert summarizer.summarize(text, LLMSummarizable("paper")) == (
        f"[SUMMARY: {len(text)} chars] A study of things."
    )
    assert "paper" in prompts[0] and "about a paragraph" in prompts[0]
    unsafe = LLMSummarizable("clinical", llm_safe=False)
    assert summarizer.summarize(text, unsafe) == TruncatingSummarizer().summarize(text, unsafe)
    assert len(prompts) == 1

    def failing(prompt: str) -> str:
        raise TimeoutError("model down")

    assert LLMSummarizer(failing).summarize(text, None).endswith("...")


def test_a_conversation_uses_its_configured_summarizer() -> None:
    c = ConversationContext("c")
    counting = Counting()
    c.summarizer = counting
    c.artifact_registry.register(CitationArtifact(title="T", abstract="z" * 500))
    c.add_user_message("hi")
    c.prepare_messages_for_llm()
    c.prepare_messages_for_llm()
    assert counting.calls == 1


def test_registered_artifacts_and_iterands_resolve_after_a_snapshot_round_trip() -> None:
    # the round trip keeps the artifacts
    c = ConversationContext("c")
    cite = CitationArtifact(title="T", abstract="a" * 300)
    listing = _pages(4)
    c.artifact_registry.register(cite)
    c.artifact_registry.register(listing)
    restored = decode_snapshot(encode_snapshot(c.to_snapshot()), "c").to_conversation()
    registry = restored.artifact_registry
    assert registry.get(cite.artifact_ref) == cite
    assert list(registry.get_all_artifacts()) == list(c.artifact_registry.get_all_artifacts())
    for page in listing.items:
        assert registry.get(page.artifact_ref) == page
    assert build_registry_section(registry) == build_registry_section(c.artifact_registry)
