"""Token accounting: a fresh estimate of the whole conversation, offline."""

from __future__ import annotations

import hashlib
import pathlib
import shutil
from typing import Annotated

import msgspec
import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry
import tiktoken_ext
from hypothesis import given, settings
from hypothesis import strategies as st

from parlour.runtime import (
    Artifact,
    ConversationContext,
    EncodingCounter,
    LLMSummarizable,
    OutgoingMessage,
    StringResponseHandler,
    build_registry_section,
    counter_for,
    type_alias,
)
from parlour.runtime.blocks import FileBlock, ImageBlock, TextBlock, ToolUseBlock
from parlour.runtime.models._tokens import IMAGE_TOKENS, OFFLINE_ENCODING, load_encoding


class FakeSpec:
    id = "fake"
    encoding: str | None = None


SPEC = FakeSpec()


@type_alias("tok:paper")
class PaperArtifact(Artifact):
    title: str
    body: Annotated[str, LLMSummarizable("paper", threshold=200)] = ""


class Finding(msgspec.Struct):
    claim: str
    paper: PaperArtifact


class NotationHandler:
    """A structured ask: long instructions in the @-notation."""

    def response_instructions(self, native_tools_available: bool, thinking_active: bool) -> str:
        return "Answer as JSON matching: " + '{"@type": "Answer", "@fields": {}} ' * 50

    def uses_schema_notation(self) -> bool:
        return True

    def parse(self, text: str) -> str:
        return text


def test_the_total_grows_with_objective_messages_and_artifacts() -> None:
    c = ConversationContext("c")
    assert c.get_total_tokens(SPEC) == 0
    c.put_main_objective("task", "Summarize the papers you are given.")
    with_objective = c.get_total_tokens(SPEC)
    assert with_objective > 0
    c.add_user_message("Here is the first paper, please read it carefully.")
    with_message = c.get_total_tokens(SPEC)
    assert with_message > with_objective
    c.artifact_registry.register(PaperArtifact(title="On tokens", body="text " * 20))
    assert c.get_total_tokens(SPEC) > with_message  # no render needed


def test_response_instructions_are_not_counted() -> None:
    totals = []
    for handler in (StringResponseHandler(), NotationHandler()):
        c = ConversationContext("c")
        c.add_message(OutgoingMessage("same text", response_handler=handler))
        totals.append(c.get_total_tokens(SPEC))
    assert totals[0] == totals[1] > 0


def test_the_count_is_fresh_each_time() -> None:
    c = ConversationContext("c")
    c.add_user_message("one two three")
    c.add_user_message("four five six seven")
    first = c.get_total_tokens(SPEC)
    assert c.get_total_tokens(SPEC) == first
    c.messages.pop()
    assert c.get_total_tokens(SPEC) < first


def test_a_missing_spec_is_refused() -> None:
    with pytest.raises(ValueError):
        ConversationContext("c").get_total_tokens(None)


def test_a_struct_slot_counts_as_its_processed_json() -> None:
    c = ConversationContext("c")
    finding = Finding(claim="c", paper=PaperArtifact(title="T", body="long words " * 500))
    c.put_main_objective("finding", finding)
    total = c.get_total_tokens(SPEC)
    counter = counter_for(None)
    section = build_registry_section(c.artifact_registry, c.summarizer)
    c.add_user_message("x")
    system_text = c.prepare_messages_for_llm().system_text
    assert total == counter.count(system_text) + counter.count(section)
    assert total < counter.count(msgspec.json.encode(finding).decode())


def test_images_cost_a_fixed_amount_whatever_their_size() -> None:
    def total_with(data: str) -> int:
        c = ConversationContext("c")
        c.add_message(OutgoingMessage(None, [ImageBlock(data=data, mime_type="image/png")]))
        return c.get_total_tokens(SPEC)

    assert total_with("a" * 10) == total_with("b" * 100_000) == IMAGE_TOKENS


def test_files_cost_a_constant_plus_a_size_term() -> None:
    def total_with(data: str) -> int:
        c = ConversationContext("c")
        c.add_message(OutgoingMessage(None, [FileBlock(data=data, mime_type="application/pdf")]))
        return c.get_total_tokens(SPEC)

    assert 0 < total_with("a" * 8) < total_with("a" * 80_000)


def test_tool_calls_count_beside_the_raw_text() -> None:
    c = ConversationContext("c")
    c.add_message(OutgoingMessage(None, [TextBlock(text="calling")], role="assistant"))
    before = c.get_total_tokens(SPEC)
    c.messages[0].add_block(ToolUseBlock(id="1", name="search", input_json='{"q":"tokens"}'))
    assert c.get_total_tokens(SPEC) > before


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=8))
def test_a_memo_hit_equals_a_fresh_count(texts: list[str]) -> None:
    shared = counter_for(None)
    encoding = shared.encoding
    for text in texts:
        fresh = len(encoding.encode_ordinary(text))
        assert shared.count(text) == fresh == shared.count(text)
        assert EncodingCounter(encoding).count(text) == fresh


def test_a_conversation_total_is_the_same_on_a_cold_and_a_warm_memo() -> None:
    c = ConversationContext("c")
    c.put_main_objective("task", "objective text")
    for i in range(20):
        c.add_user_message(f"message number {i} with some words")
    warm = c.get_total_tokens(SPEC)
    counter_for(None).clear_memo()
    assert c.get_total_tokens(SPEC) == warm


def test_special_token_text_is_counted_as_ordinary_text() -> None:
    assert counter_for(None).count("<|endoftext|>") > 1


@pytest.fixture
def isolated_tiktoken(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """An empty tiktoken cache and registry; records any attempt to read a URL."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    attempts: list[str] = []
    original = tiktoken.load.read_file

    def recording(blobpath: str) -> bytes:
        attempts.append(blobpath)
        if "://" in blobpath:
            raise AssertionError(f"tried the network: {blobpath}")
        return original(blobpath)

    monkeypatch.setattr(tiktoken.load, "read_file", recording)
    return attempts


def test_without_local_data_the_bundled_encoding_is_used_and_nothing_is_fetched(
    isolated_tiktoken: list[str],
) -> None:
    for name in (None, "cl100k_base", "gpt-4o", "o200k_base", "claude-sonnet-4"):
        assert load_encoding(name).name == OFFLINE_ENCODING
    assert not any("://" in a for a in isolated_tiktoken)


def test_the_named_encoding_is_used_when_its_data_is_on_this_machine(
    isolated_tiktoken: list[str], tmp_path: pathlib.Path
) -> None:
    # seed tiktoken's own cache with the official cl100k_base file (same hash)
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    bundled = pathlib.Path(tiktoken_ext.__path__[0]) / "data" / "cl100k_base.tiktoken"
    shutil.copy(bundled, tmp_path / hashlib.sha1(url.encode()).hexdigest())
    encoding = load_encoding("cl100k_base")
    assert encoding.name == "cl100k_base"
    offline = tiktoken.get_encoding(OFFLINE_ENCODING)
    sample = "Token counting, offline: ünïcödé and code() {}"
    assert encoding.encode_ordinary(sample) == offline.encode_ordinary(sample)


_BLOCKS = st.one_of(
    st.builds(TextBlock, text=st.text(min_size=1, max_size=120)),
    st.builds(
        ToolUseBlock,
        id=st.just("toolu_1"),
        name=st.just("search"),
        input_json=st.text(max_size=60).map(msgspec.json.encode).map(bytes.decode),
    ),
    st.builds(ImageBlock, mime_type=st.just("image/png"), data=st.just("aGk=")),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.none() | st.text(max_size=80), st.lists(_BLOCKS, max_size=4)), max_size=6
    ),
    st.text(min_size=1, max_size=40),
)
def test_a_memoized_message_count_equals_a_fresh_one_and_the_bound_is_never_below(
    messages: list[tuple[str | None, list[object]]], added: str
) -> None:
    shared = counter_for(None)
    c = ConversationContext("c")
    for raw, blocks in messages:
        c.add_message(OutgoingMessage(raw, blocks))  # type: ignore[arg-type]
    fresh = EncodingCounter(shared.encoding)  # its own memos: counts everything anew
    exact = sum(fresh.count_message(m, str) for m in c.messages)
    bound = c.get_token_bound(SPEC)
    assert (c.get_total_tokens(SPEC), c.get_total_tokens(SPEC)) == (exact, exact) <= (bound, bound)
    assert c.get_token_bound(SPEC) == exact  # once counted, the bound is the count itself
    if c.messages:
        c.messages[0].add_text(added)  # a change in place forgets the message's memo
        recounted = fresh.count_message(c.messages[0], str) + sum(
            fresh.count_message(m, str) for m in c.messages[1:]
        )
        assert c.get_token_bound(SPEC) >= recounted == c.get_total_tokens(SPEC)
