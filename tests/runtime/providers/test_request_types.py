"""The request-type checker that every provider test's wire bodies pass: it accepts what the
SDKs' request TypedDicts allow and refuses, with the path, what they do not."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, NotRequired, Required

import httpx2
import pytest
from anthropic.types import message_create_params
from openai.types.chat import completion_create_params
from typing_extensions import TypedDict

from parlour.runtime import ConversationContext, Depth
from parlour.runtime.providers import AnthropicClient
from parlour.runtime.testing import MockProvider, anthropic_message, fake_spec, mock_anthropic_sdk
from tests.runtime.providers._request_types import RequestTypeError, check
from tests.runtime.providers._sent_bodies import SentBodies, check_request

ANTHROPIC = message_create_params.MessageCreateParamsStreaming
OPENAI = completion_create_params.CompletionCreateParamsNonStreaming


class Block(TypedDict, total=False):
    type: Required[Literal["text"]]
    text: Required[str]
    note: str


class Picture(TypedDict):
    type: Literal["image"]
    url: str
    alt: NotRequired[str | None]


class Envelope(TypedDict, total=False):
    blocks: Required[Iterable[Block | Picture]]
    tags: Sequence[str]
    weights: Mapping[str, float]
    count: Annotated[int, "a count"]
    flag: bool


def anthropic_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "stream": True,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    return {**body, **changes}


def refusal(value: Any, annotation: Any) -> RequestTypeError:
    with pytest.raises(RequestTypeError) as caught:
        check(value, annotation)
    return caught.value


def test_a_body_that_fits_every_form_is_accepted() -> None:
    value = {
        "blocks": [{"type": "text", "text": "a", "note": "n"}, {"type": "image", "url": "u"}],
        "tags": ["x"],
        "weights": {"a": 1, "b": 0.5},
        "count": 3,
        "flag": False,
    }
    check(value, Envelope)
    check({"blocks": [{"type": "image", "url": "u", "alt": None}]}, Envelope)


@pytest.mark.parametrize(
    ("value", "path", "problem"),
    [
        ({}, "body", "Envelope requires 'blocks'"),
        ({"blocks": [], "colour": 1}, "body", "Envelope has no key 'colour'"),
        ({"blocks": [{"type": "text"}]}, "body.blocks[0]", "Block requires 'text'"),
        ({"blocks": [{"type": "image", "url": 1}]}, "body.blocks[0].url", "expected str, got 1"),
        ({"blocks": [{"type": "video"}]}, "body.blocks[0]", "fits none of Block, Picture"),
        ({"blocks": "ab"}, "body.blocks", "expected a list, got 'ab'"),
        ({"blocks": [], "tags": ["x", 2]}, "body.tags[1]", "expected str, got 2"),
        ({"blocks": [], "weights": {"a": "1"}}, "body.weights.a", "expected float, got '1'"),
        ({"blocks": [], "count": True}, "body.count", "expected int, got True"),
        ({"blocks": [], "count": 1.5}, "body.count", "expected int, got 1.5"),
        ({"blocks": [], "flag": 1}, "body.flag", "expected bool, got 1"),
    ],
)
def test_a_value_that_breaks_its_annotation_is_refused_at_its_path(
    value: Any, path: str, problem: str
) -> None:
    failure = refusal(value, Envelope)
    assert (failure.path, failure.problem.split(":")[0]) == (path, problem.split(":")[0])
    assert problem in str(failure)


def test_a_literal_is_matched_by_type_as_well_as_value() -> None:
    check(True, Literal[True])
    assert refusal(1, Literal[True]).problem == "expected one of [True], got 1"
    assert refusal(0, Literal[False, "no"]).path == "body"


def test_no_json_value_is_an_sdk_sentinel() -> None:
    from openai import NotGiven, Omit

    for sentinel in (NotGiven, Omit):
        assert "sentinel" in refusal(None, sentinel).problem


def test_an_annotation_the_checker_does_not_understand_is_an_error_not_a_pass() -> None:
    with pytest.raises(TypeError, match="does not understand"):
        check(b"x", bytes)


def test_a_real_anthropic_body_is_accepted_with_required_keys_enforced() -> None:
    check(anthropic_body(), ANTHROPIC)
    body = anthropic_body()
    del body["max_tokens"]
    assert "requires 'max_tokens'" in refusal(body, ANTHROPIC).problem


def test_an_unknown_key_in_an_anthropic_body_is_refused() -> None:
    failure = refusal(anthropic_body(max_token=10), ANTHROPIC)
    assert (failure.path, failure.problem) == (
        "body",
        f"{ANTHROPIC.__name__} has no key 'max_token'",
    )


def test_a_wrong_literal_in_an_anthropic_body_is_refused() -> None:
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "persistent"}}]
    failure = refusal(anthropic_body(system=system), ANTHROPIC)
    assert failure.path == "body.system[0].cache_control.type"


def test_a_bad_nested_content_block_is_refused_with_its_path() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/jpg", "data": "AA"}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "see"}, image]}]
    failure = refusal(anthropic_body(messages=messages), ANTHROPIC)
    assert failure.path == "body.messages[0].content[1].source.media_type"
    assert "'image/jpeg'" in failure.problem


def test_a_streaming_flag_picks_the_streaming_request_type() -> None:
    check_request("/v1/messages", anthropic_body())
    with pytest.raises(RequestTypeError, match="stream"):
        check_request("/v1/messages", anthropic_body(stream="yes"))


def test_an_openai_body_with_a_bad_tool_call_is_refused() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "find"}}
    body = {
        "model": "gpt-test",
        "messages": [{"role": "assistant", "content": None, "tool_calls": [call]}],
    }
    failure = refusal(body, OPENAI)
    assert failure.path == "body.messages[0].tool_calls[0].function"
    assert "requires 'arguments'" in failure.problem


def test_a_body_sent_to_an_endpoint_with_no_known_type_is_refused() -> None:
    with pytest.raises(RequestTypeError, match="no SDK request type is known"):
        check_request("/v1/embeddings", {"model": "m", "input": "x"})


def test_the_recorder_names_the_request_and_path_that_does_not_fit() -> None:
    request = httpx2.Request("POST", "https://api.anthropic.com/v1/messages")
    sent = SentBodies()
    sent.record(request, anthropic_body())
    sent.record(request, anthropic_body(service_tier="premium"))
    with pytest.raises(RequestTypeError) as caught:
        sent.check_all()
    assert caught.value.path == "request 1 to /v1/messages: body.service_tier"


def test_every_body_a_provider_test_sends_reaches_the_check(sent_bodies: SentBodies) -> None:
    handler = MockProvider(anthropic_message("ok"))
    client = AnthropicClient(fake_spec(), client=mock_anthropic_sdk(handler))
    c = ConversationContext("r-1")
    c.output_declaration, c.depth = 1_000, Depth.IMMEDIATE
    c.add_user_message("hi")
    client.respond(c)
    assert sent_bodies.sent == [("/v1/messages", handler.last_body)]


def test_a_required_key_of_a_partial_typeddict_is_enforced_under_postponed_annotations() -> None:
    """Under postponed annotations (as here and in the SDKs) some Pythons file the
    ``Required[...]`` keys of a ``total=False`` class as optional; the checker reads the
    wrapper itself."""
    assert refusal({"type": "text"}, Block).problem == "Block requires 'text'"
