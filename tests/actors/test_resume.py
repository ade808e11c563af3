"""``Chat.resume``: a turn that stopped before the model's last word is continued from the
conversation's last durable step, with no new user message; a finished one is not."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from parlour.actors import Agent, ConversationService
from parlour.runtime import Depth, LLMResponse, OutputSize, PreparedConversation, ScriptedClient
from parlour.runtime.errors import IllegalStateError, UncorrectableLLMError
from parlour.stores import LmdbStore

from .agent_helpers import user_texts


def _failing(_: PreparedConversation) -> LLMResponse:
    raise UncorrectableLLMError("The model is down.")


@pytest.mark.parametrize("path", ["resume", "aresume"])
def test_a_turn_whose_model_call_failed_is_resumed_without_a_second_user_message(
    tmp_path: Path, path: str
) -> None:
    with LmdbStore(tmp_path / "db") as store, ConversationService(store) as service:
        broken = Agent(ScriptedClient([_failing]), output=OutputSize.COMPACT, depth=Depth.IMMEDIATE)
        chat = broken.chat(service, user_id="alice")
        with pytest.raises(UncorrectableLLMError):
            chat.send("Are you there?")
        assert chat.interrupted  # the user's message is durable, with no answer after it
        working = Agent(
            ScriptedClient(["Yes, I am."]), output=OutputSize.COMPACT, depth=Depth.IMMEDIATE
        )
        again = working.chat(service, user_id="alice", conversation_id=chat.conversation_id)
        reply = again.resume() if path == "resume" else asyncio.run(again.aresume())
        assert reply.text == "Yes, I am."
        assert reply.messages[0].role == "assistant"  # the turn added no user message
        assert not again.interrupted
        stored = store.load(chat.conversation_id, "alice")
        assert stored is not None
        assert user_texts(stored) == ["Are you there?"]


def test_a_finished_conversation_has_nothing_to_resume(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "db") as store, ConversationService(store) as service:
        agent = Agent(ScriptedClient(["Hello."]), output=OutputSize.COMPACT, depth=Depth.IMMEDIATE)
        chat = agent.chat(service, user_id="alice")
        chat.send("Hi")
        assert not chat.interrupted
        with pytest.raises(IllegalStateError, match="no interrupted turn to resume"):
            chat.resume()
        stored = store.load(chat.conversation_id, "alice")
        assert stored is not None
        assert [m.role for m in stored.messages] == ["user", "assistant"]  # nothing added
