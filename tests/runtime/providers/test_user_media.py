"""Anthropic, OpenAI and Converse take images and files from the user only, and refuse a
request with one in an assistant message (an application may keep one there: an image its
image model made), on every later request of the conversation. Each dialect sends it at
the end of the next user message, where the model still sees it, with a note in its
place; with no user message after it, the note alone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parlour.runtime import (
    ConversationContext,
    LLMClient,
    Turn,
    TurnRole,
)
from parlour.runtime.blocks import ContentBlock, FileBlock, TextBlock
from parlour.runtime.providers import (
    AnthropicClient,
    BedrockClient,
    OpenAIClient,
    OpenAIResponsesClient,
)
from parlour.runtime.providers._user_media import user_media
from parlour.runtime.testing import fake_spec

from ._image_headers import conversation_of, image, png
from ._sent_bodies import check_request

PICTURE = image(png(64, 48), "image/png")
PDF = FileBlock(data="JVBERi0=", mime_type="application/pdf", filename="chart.pdf")
CLIENTS: dict[str, Callable[[], LLMClient]] = {
    "/v1/messages": lambda: AnthropicClient(
        fake_spec(id="claude-t", provider="anthropic"), client=object()
    ),
    "/chat/completions": lambda: OpenAIClient(
        fake_spec(id="gpt-t", provider="openai"), client=object()
    ),
    "/responses": lambda: OpenAIResponsesClient(
        fake_spec(id="gpt-t", provider="openai"), client=object()
    ),
    "converse": lambda: BedrockClient(
        fake_spec(id="anthropic.claude-t-v1:0", provider="bedrock"), client=object()
    ),
}


def _conversation() -> ConversationContext:
    draw, describe = [TextBlock(text="Draw a cat.")], [TextBlock(text="Describe it.")]
    return conversation_of("m-1", [draw, describe], answer=[TextBlock(text="Here it is."), PICTURE])


def _body(endpoint: str, c: ConversationContext) -> dict[str, Any]:
    client = CLIENTS[endpoint]()
    body: dict[str, Any] = client.encode(client.build_request(c))  # type: ignore[assignment]
    if endpoint != "converse":
        check_request(endpoint, body)  # the SDK's request types and the providers' rules
    return body


MEDIA = {"image", "image_url", "input_image", "document", "file", "input_file"}


def _media(item: dict[str, Any]) -> int:
    """The images and files in one message of any dialect's body."""
    content = item.get("content")
    if not isinstance(content, list):
        return 0
    return sum(
        part.get("type") in MEDIA
        or ("type" not in part and ("image" in part or "document" in part))
        for part in content
    )


@pytest.mark.parametrize("endpoint", CLIENTS)
def test_an_image_of_an_assistant_message_is_sent_in_the_next_user_message(endpoint: str) -> None:
    body = _body(endpoint, _conversation())
    items = [i for i in body.get("messages") or body["input"] if i.get("role")]
    assert [i["role"] for i in items] == ["user", "assistant", "user"]
    first, answer, last = items
    assert _media(answer) == 0 and _media(first) == 0 and _media(last) == 1
    assert "(An image was shown here; it follows in the next message.)" in repr(answer)
    assert repr(last).index("Describe it.") < repr(last).index("image")  # the user's first


def _turn(role: TurnRole, kinds: list[str]) -> Turn:
    blocks: list[ContentBlock] = []
    for n, kind in enumerate(kinds):
        blocks.append(
            PICTURE if kind == "image" else PDF if kind == "file" else TextBlock(text=f"t{n}")
        )
    return Turn(role=role, blocks=blocks)


turns = st.lists(
    st.tuples(
        st.sampled_from([TurnRole.USER, TurnRole.ASSISTANT]),
        st.lists(st.sampled_from(["text", "image", "file"]), min_size=1, max_size=4),
    ),
    max_size=8,
)


@given(turns)
def test_every_medium_leaves_the_assistant_turns_and_reaches_the_next_user_turn_once(
    shape: list[tuple[TurnRole, list[str]]],
) -> None:
    before = [_turn(role, kinds) for role, kinds in shape]
    after = user_media(before)
    assert [t.role for t in after] == [t.role for t in before]
    last_user = max((i for i, t in enumerate(before) if t.role is TurnRole.USER), default=-1)
    moved = 0
    for index, (old, new) in enumerate(zip(before, after, strict=True)):
        media = [b for b in old.blocks if b is PICTURE or b is PDF]
        if old.role is TurnRole.ASSISTANT:
            assert not any(b is PICTURE or b is PDF for b in new.blocks)
            assert len(new.blocks) == len(old.blocks)  # a note in each one's place
            moved += len(media) if index < last_user else 0
        else:
            assert new.blocks[: len(old.blocks)] == old.blocks  # the user's own, first
            moved -= len(new.blocks) - len(old.blocks)
    assert moved == 0  # each one moved arrives once


def test_a_conversation_without_media_in_assistant_turns_is_returned_as_it_was() -> None:
    before = [_turn(TurnRole.USER, ["text", "image"]), _turn(TurnRole.ASSISTANT, ["text"])]
    assert user_media(before) is before
