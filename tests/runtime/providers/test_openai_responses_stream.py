"""A Responses API answer read by parlour: for any answer the API can send, streamed and cut
into chunks anywhere or sent whole, the text deltas and the decoded response are exactly
those the SDK's own typed reading gives (the reference: the SDK over a mock transport, its
typed objects decoded as parlour decoded them before it read the JSON itself)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx2
import openai
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.runtime import ConversationContext, Depth
from parlour.runtime.blocks import ReasoningBlock, TextBlock, ToolUseBlock
from parlour.runtime.providers import LLMResponse, OpenAIResponsesClient, StopReason, Usage
from parlour.runtime.providers._openai_responses import _Events
from parlour.runtime.testing import (
    fake_spec,
    mock_openai_sdk,
    openai_response,
    openai_response_sse,
)

_text = st.text(st.characters(), max_size=20)  # lone surrogates too: JSON escapes them
_count = st.integers(0, 99_999)


@st.composite
def answers(draw: st.DrawFn) -> dict[str, Any]:
    """An answer: reasoning items, a message (text, maybe a refusal), function calls, any
    status the stream ends with, usage with or without the cache-write count."""
    reasoning = [
        {
            "id": f"rs_{i}",
            "type": "reasoning",
            "summary": [
                {"type": "summary_text", "text": draw(_text)}
                for _ in range(draw(st.integers(0, 3)))
            ],
            "encrypted_content": draw(_text),
        }
        for i in range(draw(st.integers(0, 2)))
    ]
    calls = [
        {"id": f"call_{i}", "name": f"tool_{i}", "arguments": json.dumps({"q": draw(_text)})}
        for i in range(draw(st.integers(0, 2)))
    ]
    status = draw(st.sampled_from(["completed", "incomplete"]))
    answer = openai_response(
        draw(st.none() | _text),
        reasoning=reasoning,
        tool_calls=calls,
        status=status,
        incomplete_reason=(
            draw(st.sampled_from(["max_output_tokens", "content_filter", "other"]))
            if status == "incomplete"
            else None
        ),
        model=draw(st.sampled_from(["gpt-5-mini", "gpt-x"])),
        input_tokens=draw(_count),
        output_tokens=draw(_count),
        cached_tokens=draw(_count),
        reasoning_tokens=draw(_count),
        refusal=draw(st.none() | _text),
    )
    if draw(st.booleans()):
        answer["usage"]["input_tokens_details"]["cache_write_tokens"] = draw(_count)
    return answer


def _cut(data: st.DataObject, raw: bytes) -> list[bytes]:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=6)))
    return [raw[a:b] for a, b in itertools.pairwise([0, *cuts, len(raw)])]


def _typed_reference(response: Any) -> LLMResponse:
    """How parlour decoded the SDK's typed ``Response`` before it read the JSON itself."""
    blocks: list[Any] = []
    refusals: list[str] = []
    output = list(response.output)
    for item, after in itertools.pairwise([*output, None]):
        if item.type == "reasoning":
            summary = "".join(part.text for part in item.summary or ())
            followed_by = getattr(after, "id", None) if after is not None else None
            item_json = json.dumps(item.to_dict(mode="json"))
            blocks.append(
                ReasoningBlock(item_json=item_json, summary=summary, followed_by=followed_by)
            )
        elif item.type == "function_call":
            blocks.append(ToolUseBlock(id=item.call_id, name=item.name, input_json=item.arguments))
        elif item.type == "message":
            refusals += [p.refusal for p in item.content if p.type == "refusal"]
            blocks += [TextBlock(text=p.text) for p in item.content if p.type == "output_text"]
    incomplete = {
        "max_output_tokens": StopReason.MAX_TOKENS,
        "content_filter": StopReason.CONTENT_FILTERED,
    }
    if refusals:
        stop = StopReason.CONTENT_FILTERED
    elif response.status == "incomplete":
        stop = incomplete.get(response.incomplete_details.reason or "", StopReason.UNKNOWN)
    elif any(isinstance(b, ToolUseBlock) for b in blocks):
        stop = StopReason.TOOL_USE
    else:
        stop = StopReason.END_TURN if response.status == "completed" else StopReason.UNKNOWN
    usage = response.usage
    return LLMResponse(
        model_id=response.model,
        blocks=blocks,
        stop_reason=stop,
        usage=Usage.subset(
            usage.input_tokens,
            getattr(usage.input_tokens_details, "cache_write_tokens", None),
            usage.input_tokens_details.cached_tokens,
            usage.output_tokens,
            usage.output_tokens_details.reasoning_tokens,
        ),
        refusal_explanation="\n".join(refusals) or None,
    )


def same_answer(ours: LLMResponse, theirs: LLMResponse) -> None:
    """Equal, a reasoning item's JSON compared as JSON (the SDK dumped its model's field
    order; parlour keeps the server's)."""

    def plain(block: Any) -> Any:
        if isinstance(block, ReasoningBlock):
            return (json.loads(block.item_json), block.summary, block.followed_by)
        return block

    assert [plain(b) for b in ours.blocks] == [plain(b) for b in theirs.blocks]
    assert (ours.model_id, ours.stop_reason, ours.usage, ours.refusal_explanation) == (
        theirs.model_id,
        theirs.stop_reason,
        theirs.usage,
        theirs.refusal_explanation,
    )


def _sdk_reading(raw: bytes, streamed: bool) -> tuple[list[str], LLMResponse]:
    def reply(request: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "text/event-stream" if streamed else "application/json"}
        return httpx2.Response(200, content=raw, headers=headers)

    sdk = mock_openai_sdk(reply)
    if not streamed:
        return [], _typed_reference(sdk.responses.create(model="m", input=[]))
    deltas, final = [], None
    for event in sdk.responses.create(model="m", input=[], stream=True):
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type in ("response.completed", "response.incomplete"):
            final = event.response
    assert final is not None
    return [d for d in deltas if d], _typed_reference(final)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answer=answers(), data=st.data())
def test_a_stream_cut_anywhere_reads_as_the_sdks_typed_events(
    answer: dict[str, Any], data: st.DataObject
) -> None:
    raw = openai_response_sse(answer, chunk=data.draw(st.integers(1, 7)))
    if data.draw(st.booleans()):
        raw = raw.replace(b"\n", b"\r\n")
    events = _Events(openai, httpx2.Request("POST", "https://api.openai.com/v1/responses"), "m")
    deltas = [delta for piece in _cut(data, raw) for delta in events.feed(piece)]
    deltas += list(events.close())
    theirs_deltas, theirs = _sdk_reading(raw, streamed=True)
    assert deltas == theirs_deltas
    same_answer(events.response(), theirs)


@settings(max_examples=60, deadline=None)
@given(answer=answers())
def test_a_whole_answer_reads_as_the_sdks_typed_response(answer: dict[str, Any]) -> None:
    raw = json.dumps(answer).encode()  # a lone surrogate escaped, as a server sends it

    def reply(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=raw, headers={"content-type": "application/json"})

    client = OpenAIResponsesClient(
        fake_spec(id="gpt-test", provider="openai"), client=mock_openai_sdk(reply)
    )
    context = ConversationContext("c-whole", user_id="u")
    context.depth, context.output_declaration = Depth.IMMEDIATE, 1_000
    context.add_user_message("Hello.")
    request = client.build_request(context)
    ours = client._send(request)
    _, theirs = _sdk_reading(raw, streamed=False)
    same_answer(ours, theirs)


def test_an_answer_with_no_output_items_reads_as_its_status_says() -> None:
    """A reasoning model that ran out of tokens may send no output item at all."""
    answer = openai_response(None, status="incomplete", incomplete_reason="max_output_tokens")
    raw = openai_response_sse(answer)
    events = _Events(openai, httpx2.Request("POST", "https://api.openai.com/v1/responses"), "m")
    assert list(events.feed(raw)) == []
    read = events.response()
    assert (read.blocks, read.stop_reason) == ([], StopReason.MAX_TOKENS)
