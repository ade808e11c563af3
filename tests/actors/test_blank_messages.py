"""A message that says nothing (blank text, no attachment) is refused at the boundary on
every way of sending, before the conversation is obtained: nothing is added or saved, and
the chat goes on. The providers drop blank text, so it would have left the request ending
in the model's own last answer. An attachment alone says something."""

from __future__ import annotations

import asyncio
import base64

import pytest

from parlour.actors import Agent, Chat, ConversationService
from parlour.runtime import Depth, OutputSize, ScriptedClient
from parlour.runtime.blocks import ImageBlock

from .agent_helpers import stored, user_texts

BLANK = ["", " ", "\n\t ", "\u2003"]  # the last an em space: whitespace too
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(24))).decode()


def _chat(service: ConversationService) -> Chat:
    agent = Agent(
        ScriptedClient(), objective="Answer.", output=OutputSize.STANDARD, depth=Depth.IMMEDIATE
    )
    return agent.chat(service, user_id="alice")


@pytest.mark.parametrize("text", BLANK)
def test_a_blank_message_is_refused_on_every_way_of_sending_and_nothing_is_kept(
    service: ConversationService, text: str
) -> None:
    chat = _chat(service)
    with pytest.raises(ValueError, match="not blank"):
        chat.send(text)
    assert service.store is not None
    assert not service.store.exists(chat.conversation_id, "alice")
    chat.send("Hello.")
    version = service.store.version_of(chat.conversation_id, "alice")
    with pytest.raises(ValueError, match="not blank"):
        list(chat.stream(text))
    with pytest.raises(ValueError, match="not blank"):
        asyncio.run(chat.asend(text))
    cid = chat.conversation_id
    assert service.store.version_of(cid, "alice") == version
    assert user_texts(stored(service, cid, "alice")) == ["Hello."]
    assert service.owning_thinker(cid, "alice") is None
    assert chat.send("Again.").text
    with pytest.raises(ValueError, match="not blank"):
        service.offer(cid, "alice", text)


def test_an_attachment_alone_says_something(service: ConversationService) -> None:
    chat = _chat(service)
    image = ImageBlock(data=PNG, mime_type="image/png")
    assert chat.send("", attachments=[image]).text
    cid = chat.conversation_id
    [message] = [m for m in stored(service, cid, "alice").messages if m.role == "user"]
    assert any(isinstance(b, ImageBlock) for b in message.blocks)
