"""Anthropic refuses a request of more than 100 images, or of more than 20 with one over
2,000 pixels on a side, and a conversation that stored them would have every later request
refused. The request keeps the latest images it may hold; each earlier one goes as a note
in its place. Sizes are read from the images' headers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from parlour.runtime import ConversationContext
from parlour.runtime.blocks import ContentBlock, ImageBlock, TextBlock
from parlour.runtime.providers import AnthropicClient, build_anthropic_params
from parlour.runtime.testing import MockProvider, anthropic_message, fake_spec, mock_anthropic_sdk

from ._image_headers import conversation_of, image, jpeg, png
from ._sent_bodies import check_request

SPEC = fake_spec(id="claude-test", provider="anthropic")
SMALL, LARGE = image(png(800, 600), "image/png"), image(jpeg(3_000, 2_000), "image/jpeg")


def _conversation(turns: Sequence[Sequence[ContentBlock]]) -> ConversationContext:
    return conversation_of("a-1", [[TextBlock(text="Look."), *blocks] for blocks in turns])


def _sent(c: ConversationContext) -> dict[str, Any]:
    return build_anthropic_params(AnthropicClient(SPEC, client=object()).build_request(c))


def _images(params: dict[str, Any]) -> list[str]:
    return [
        c["source"]["data"]
        for m in params["messages"]
        for c in m["content"]
        if c["type"] == "image"
    ]


def _notes(params: dict[str, Any]) -> int:
    texts = [c.get("text", "") for m in params["messages"] for c in m["content"]]
    return sum(text.startswith("(An image was attached here") for text in texts)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([SMALL, LARGE]), max_size=12), min_size=1, max_size=14))
def test_any_history_of_images_is_sent_as_anthropic_takes_it(
    turns: list[list[ImageBlock]],
) -> None:
    attached = [block.data for blocks in turns for block in blocks]
    params = _sent(_conversation(turns))
    sent = _images(params)
    assert len(sent) <= 100
    if len(sent) > 20:
        assert LARGE.data not in sent
    assert sent == attached[len(attached) - len(sent) :]  # the latest, in order
    assert _notes(params) == len(attached) - len(sent)


def test_twenty_images_of_any_size_are_all_sent() -> None:
    params = _sent(_conversation([[LARGE] * 10, [SMALL] * 10]))
    assert len(_images(params)) == 20 and _notes(params) == 0


def test_past_twenty_with_a_large_one_the_latest_twenty_are_sent() -> None:
    params = _sent(_conversation([[LARGE] * 3, [SMALL] * 20]))
    assert _images(params) == [SMALL.data] * 20
    assert _notes(params) == 3


def test_past_a_hundred_small_ones_the_latest_hundred_are_sent_through_the_sdk() -> None:
    provider = MockProvider()
    provider.add(anthropic_message("ok"))
    client = AnthropicClient(SPEC, client=mock_anthropic_sdk(provider))
    assert client.respond(_conversation([[SMALL] * 10 for _ in range(11)])).text == "ok"
    body = json.loads(provider.requests[-1].content)
    check_request("/v1/messages", body)
    assert len(_images(body)) == 100 and _notes(body) == 10
