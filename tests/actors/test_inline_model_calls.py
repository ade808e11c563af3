"""A client that answers inline (no I/O, cannot block) is asked in the turn's own thread, not
on a model worker: the same events, the same saves, the same answer. A client that may
block (every provider's, a scripted model with a function reply or answering its own way)
is asked in the turn's own thread by ``send`` too (no worker caps a host), and on a model
worker by ``stream``, whose caller reads each delta as it comes."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from parlour.actors import Agent, ConversationService, TextDelta, TurnCancelledError, TurnDone
from parlour.runtime import (
    ConversationContext,
    Depth,
    LLMResponse,
    OutputSize,
    PreparedConversation,
    ScriptedClient,
    StopReason,
)
from parlour.runtime.blocks import TextBlock, ToolUseBlock

from .agent_helpers import stored


class Recorded(ScriptedClient):
    """The scripted model, recording the thread of each answer; ``inline`` is what it
    declares."""

    def __init__(self, *, inline: bool) -> None:
        super().__init__()
        self.inline = inline
        self.threads: list[str] = []

    @property
    def answers_inline(self) -> bool:
        return self.inline

    def respond(self, *args: Any, **kwargs: Any) -> LLMResponse:
        self.threads.append(threading.current_thread().name)
        return super().respond(*args, **kwargs)


def _agent(client: ScriptedClient, **kwargs: Any) -> Agent:
    return Agent(client, output=OutputSize.STANDARD, depth=Depth.IMMEDIATE, **kwargs)


def _answer(prepared: PreparedConversation) -> LLMResponse:
    return LLMResponse(model_id="scripted", blocks=[TextBlock(text="From a function.")])


def test_the_scripted_model_answers_inline_unless_a_reply_or_a_subclass_may_block() -> None:
    assert ScriptedClient().answers_inline
    assert ScriptedClient(["text", LLMResponse(model_id="scripted", blocks=[])]).answers_inline
    assert not ScriptedClient(["text", _answer]).answers_inline

    class OwnWay(ScriptedClient):
        def _send(self, request: Any) -> LLMResponse:
            return super()._send(request)

    assert not OwnWay().answers_inline


def test_a_provider_client_never_answers_inline() -> None:
    from parlour.runtime.providers import AnthropicClient
    from parlour.runtime.testing import MockProvider, fake_spec, mock_anthropic_sdk

    spec = fake_spec(id="claude-test", provider="anthropic")
    assert not AnthropicClient(spec, client=mock_anthropic_sdk(MockProvider())).answers_inline


@pytest.mark.parametrize("inline", [True, False])
def test_a_sent_turn_asks_any_client_in_its_own_thread(
    service: ConversationService, inline: bool
) -> None:
    client = Recorded(inline=inline)
    chat = _agent(client).chat(service, user_id="alice")
    reply = chat.send("Hello there")
    assert reply.text == "Answer 1: you said 'Hello there'."
    assert client.threads == [threading.current_thread().name]
    roles = [m.role for m in stored(service, chat.conversation_id, "alice").messages]
    assert roles == ["user", "assistant"]  # both saves landed, the deferred one included


@pytest.mark.parametrize("inline", [True, False])
def test_a_streamed_turn_asks_an_inline_client_in_its_own_thread_and_others_on_a_worker(
    service: ConversationService, inline: bool
) -> None:
    client = Recorded(inline=inline)
    chat = _agent(client).chat(service, user_id="alice")
    assert isinstance(list(chat.stream("Hello there"))[-1], TurnDone)
    caller = threading.current_thread().name
    assert client.threads == [caller] if inline else client.threads[0].startswith("parlour-model")


@pytest.mark.parametrize("inline", [True, False])
def test_a_streamed_turn_yields_the_same_deltas_inline_or_on_a_worker(
    service: ConversationService, inline: bool
) -> None:
    chat = _agent(Recorded(inline=inline)).chat(service, user_id="alice")
    events = list(chat.stream("Say four words"))
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert texts == ["Answer", " 1:", " you", " said", " 'Say", " four", " words'."]
    assert isinstance(events[-1], TurnDone) and events[-1].reply.text == "".join(texts)


def test_a_joiner_of_a_sent_turn_gets_an_inline_answers_text(
    service: ConversationService,
) -> None:
    """The answer is published whole, once, as it comes: a joiner that arrives after it
    finds it as the text so far."""
    loop = asyncio.new_event_loop()
    running = threading.Thread(target=loop.run_forever, daemon=True)
    running.start()
    joiners: list[tuple[AsyncIterator[Any], Any]] = []

    def lookup() -> str:
        """Look something up."""

        async def follow() -> tuple[AsyncIterator[Any], Any]:
            joined = service.join(chat.conversation_id, "alice")
            return joined, await anext(joined)  # the text so far: it follows from now on

        joiners.append(asyncio.run_coroutine_threadsafe(follow(), loop).result(10))
        return "found"

    chat = _agent(ScriptedClient(), tools=[lookup]).chat(service, user_id="alice")
    try:
        reply = chat.send("Please lookup the weather")

        async def drain() -> list[Any]:
            joined, first = joiners[0]
            return [first] + [e async for e in joined if not isinstance(e, TurnDone)]

        events = asyncio.run_coroutine_threadsafe(drain(), loop).result(10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        running.join(10)
        loop.close()
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert texts[0] == "Calling lookup."  # the first answer, whole, as the text so far
    assert "".join(texts[1:]) == reply.text  # the second, published once, live


def test_an_inline_call_of_a_cancelled_turn_is_never_made(service: ConversationService) -> None:
    client = Recorded(inline=True)
    chat: Any = None

    def cancel_first(context: ConversationContext, ledger: Any) -> None:
        chat.thinker.cancel_workflow("the user left")

    chat = _agent(client, before_model_call=cancel_first).chat(service, user_id="alice")
    with pytest.raises(TurnCancelledError, match="the user left"):
        chat.send("Hello")
    assert client.threads == []  # refused before the model was asked
    assert [m.role for m in stored(service, chat.conversation_id, "alice").messages] == ["user"]
    assert service.owning_thinker(chat.conversation_id, "alice") is None


@pytest.mark.parametrize("inline", [True, False])
def test_a_force_release_during_a_model_call_ends_the_turn_without_a_second_owner(
    service: ConversationService, inline: bool
) -> None:
    """A worker's call is woken; nothing wakes an inline call, so the release is found as it
    returns. Either way its answer is dropped, the turn raises, and nothing after the
    release is saved."""
    chat: Any = None

    class Released(Recorded):
        def respond(self, *args: Any, **kwargs: Any) -> LLMResponse:
            if not self.threads:  # the first call only
                assert service.force_release(chat.conversation_id, "alice") is not None
            return super().respond(*args, **kwargs)

    client = Released(inline=inline)
    chat = _agent(client).chat(service, user_id="alice")
    with pytest.raises(TurnCancelledError):
        chat.send("Hello")
    assert len(client.threads) == 1
    assert service.owning_thinker(chat.conversation_id, "alice") is None
    roles = [m.role for m in stored(service, chat.conversation_id, "alice").messages]
    assert roles == ["user"]  # the answer after the release was never saved
    assert chat.send("Again").text.startswith("Answer")  # and the chat goes on


def test_a_force_release_during_an_async_inline_call_drops_its_answer_too(
    service: ConversationService,
) -> None:
    """On the event loop the scripted model answers without awaiting, so nothing can
    interrupt it: the release is found as it returns, and the answer is dropped (one with
    no text, which no text delta could have stopped)."""
    chat: Any = None
    calls: list[str] = []

    def lookup() -> str:
        """Look something up."""
        return "found"

    only_a_call = LLMResponse(
        model_id="scripted",
        blocks=[ToolUseBlock(id="toolu_1", name="lookup", input_json="{}")],
        stop_reason=StopReason.TOOL_USE,
    )

    class Released(ScriptedClient):
        async def _asend(self, request: Any, on_text: Any) -> LLMResponse:
            if not calls:
                assert service.force_release(chat.conversation_id, "alice") is not None
            calls.append("asked")
            return await super()._asend(request, on_text)

    chat = _agent(Released([only_a_call]), tools=[lookup]).chat(service, user_id="alice")
    with pytest.raises(TurnCancelledError):
        asyncio.run(chat.asend("Hello"))
    assert [m.role for m in stored(service, chat.conversation_id, "alice").messages] == ["user"]
    assert service.owning_thinker(chat.conversation_id, "alice") is None
    assert asyncio.run(chat.asend("Again")).text.startswith("Answer")
