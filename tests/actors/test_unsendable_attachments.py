"""An attachment the agent's provider cannot take (an image or file type it lacks, an image
or document past its size, an image past its pixels on a side) is refused when it is sent,
before the conversation is obtained: nothing is stored, and the chat goes on. Stored, it
failed every later request of the conversation. At the limit it is sent; the scripted
model takes anything."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest

from parlour.actors import Agent, Chat, ConversationService
from parlour.runtime import Depth, LLMClient, OutputSize, ScriptedClient
from parlour.runtime.blocks import ContentBlock, FileBlock, ImageBlock
from parlour.runtime.providers import (
    AnthropicClient,
    BedrockClient,
    OpenAIClient,
    OpenAIResponsesClient,
)
from parlour.runtime.testing import (
    ConverseStreamMock,
    MockProvider,
    anthropic_message,
    converse_stream_events,
    dummy_bedrock_client,
    fake_spec,
    mock_anthropic_sdk,
    mock_openai_sdk,
    openai_completion,
    openai_response,
)
from tests.runtime.providers._image_headers import gif, image, jpeg, png, webp

from .agent_helpers import stored, user_texts

MiB = 1024 * 1024


def _image(mime: str, raw: bytes = b"\x89PNG\r\n\x1a\n" + bytes(24)) -> ImageBlock:
    return ImageBlock(data=base64.b64encode(raw).decode(), mime_type=mime)


DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def _file(mime: str, size: int, name: str = "notes", data: bytes | None = None) -> FileBlock:
    raw = bytes(size) if data is None else data
    return FileBlock(data=base64.b64encode(raw).decode(), mime_type=mime, filename=name)


def _base64_of(length: int) -> ImageBlock:
    """A PNG image whose base64 is ``length`` characters (a multiple of 4)."""
    return _image("image/png", bytes(length // 4 * 3))


@pytest.fixture
def clients() -> Iterator[dict[str, LLMClient]]:
    """Each dialect's client over its SDK's double, answering every call "ok"."""
    anthropic, chat, responses = MockProvider(), MockProvider(), MockProvider()
    for _ in range(4):
        anthropic.add(anthropic_message("ok"))
        chat.add(openai_completion("ok"))
        responses.add(openai_response("ok"))
    boto = dummy_bedrock_client()
    ConverseStreamMock(boto, *[converse_stream_events("ok") for _ in range(4)])
    yield {
        "anthropic": AnthropicClient(
            fake_spec(id="claude-t", provider="anthropic"), client=mock_anthropic_sdk(anthropic)
        ),
        "chat": OpenAIClient(
            fake_spec(id="gpt-t", provider="openai"), client=mock_openai_sdk(chat)
        ),
        "responses": OpenAIResponsesClient(
            fake_spec(id="gpt-t", provider="openai"), client=mock_openai_sdk(responses)
        ),
        "bedrock": BedrockClient(
            fake_spec(id="anthropic.claude-t-v1:0", provider="bedrock"), client=boto
        ),
    }


def _chat(client: LLMClient, service: ConversationService) -> Chat:
    agent = Agent(client, objective="Answer.", output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
    return agent.chat(service, user_id="alice")


# (dialect, attachment, words the refusal holds)
REFUSED: list[tuple[str, Any, str]] = [
    *[
        (d, _image("image/heic"), "JPEG, PNG, GIF or WebP")
        for d in ("anthropic", "chat", "responses", "bedrock")
    ],
    ("anthropic", _base64_of(5 * MiB + 4), "at most 5,242,880 bytes"),
    ("bedrock", _image("image/png", bytes(3_750_001)), "at most 3,750,000 bytes"),
    ("bedrock", _file("application/pdf", 4_500_001), "at most 4,500,000 bytes"),
    ("bedrock", _file("application/x-msdownload", 10), "takes documents as"),
    (
        "anthropic",
        image(png(8_001, 600), "image/png"),
        "8,000 pixels on a side, and one is 8,001 x 600",
    ),
    ("anthropic", image(jpeg(4_000, 9_000, metadata=200_000), "image/jpeg"), "9,000"),
    ("bedrock", image(webp(600, 8_001), "image/webp"), "Converse takes images of at most 8,000"),
    ("bedrock", image(gif(12_000, 10), "image/gif"), "12,000 x 10"),
    ("chat", _file(DOCX, 10), "Chat Completions takes files as PDF or text"),
    ("chat", _file("text/plain", 0, data=b"\xff\xfe not UTF-8"), "not base64 of UTF-8 text"),
]


@pytest.mark.parametrize(("dialect", "attachment", "says"), REFUSED)
def test_an_attachment_the_provider_cannot_take_is_refused_at_send_and_nothing_is_kept(
    clients: dict[str, LLMClient],
    service: ConversationService,
    dialect: str,
    attachment: ContentBlock,
    says: str,
) -> None:
    chat = _chat(clients[dialect], service)
    with pytest.raises(ValueError, match=says) as refused:
        chat.send("What is this?", attachments=[attachment])
    assert chat.conversation_id in str(refused.value)
    assert service.store is not None
    assert not service.store.exists(chat.conversation_id, "alice")
    assert chat.send("Hello.").text == "ok"  # the conversation goes on
    assert user_texts(stored(service, chat.conversation_id, "alice")) == ["Hello."]


@pytest.mark.parametrize(
    ("dialect", "attachment"),
    [
        ("anthropic", _base64_of(5 * MiB)),
        ("bedrock", _image("image/png", bytes(3_750_000))),
        ("bedrock", _file("application/pdf", 4_500_000)),
        ("chat", _image("image/webp")),
        ("anthropic", image(png(8_000, 8_000), "image/png")),
        ("bedrock", image(jpeg(8_000, 100), "image/jpeg")),
        ("chat", image(png(12_000, 12_000), "image/png")),  # OpenAI scales a large one down
        ("responses", image(png(12_000, 12_000), "image/png")),
        ("chat", _file("application/pdf", 10)),
        ("responses", _file(DOCX, 10)),  # the Responses API reads many types
    ],
)
def test_an_attachment_at_the_limit_is_taken(
    clients: dict[str, LLMClient], dialect: str, attachment: ContentBlock
) -> None:
    clients[dialect].check_attachments([attachment], "c-1")  # nothing raised


def test_a_chat_sends_an_image_its_provider_takes(
    clients: dict[str, LLMClient], service: ConversationService
) -> None:
    chat = _chat(clients["chat"], service)
    assert chat.send("What is this?", attachments=[_image("image/webp")]).text == "ok"


def test_the_scripted_model_takes_any_attachment(service: ConversationService) -> None:
    chat = _chat(ScriptedClient(), service)
    assert chat.send("What is this?", attachments=[_image("image/heic")]).text


def test_chat_completions_gets_a_text_file_as_its_text(service: ConversationService) -> None:
    """OpenAI's guide: Chat Completions takes a file only as a PDF; a text file's text goes
    as a text part."""
    server = MockProvider()
    server.add(openai_completion("ok"))
    client = OpenAIClient(fake_spec(id="gpt-t", provider="openai"), client=mock_openai_sdk(server))
    notes = _file("text/markdown", 0, name="notes.md", data=b"# Tides\nHigh at nine.")
    assert _chat(client, service).send("Summarize.", attachments=[notes]).text == "ok"
    [body] = server.bodies
    parts = body["messages"][-1]["content"]
    assert {"type": "text", "text": "File notes.md:\n# Tides\nHigh at nine."} in parts
    assert not any(part["type"] == "file" for part in parts)
