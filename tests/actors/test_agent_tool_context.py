"""A tool's ``ToolContext``: what a call learns of its user, conversation, turn and call, the
chat's deps, a bound logger and its cancellation, on all four paths of a turn, for sync and
async tools, over the real Anthropic SDK against a recording provider double."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from loguru import logger

from parlour.actors import (
    Agent,
    Chat,
    ConversationService,
    Reply,
    TurnCancelledError,
    TurnDone,
)
from parlour.runtime import Depth, LLMResponse, OutputSize, ScriptedClient, ToolContext
from parlour.runtime.providers import AnthropicClient
from parlour.runtime.testing import (
    MockProvider,
    anthropic_message,
    fake_spec,
    mock_anthropic_sdk,
    mock_async_anthropic_sdk,
)

from .agent_helpers import calls, send_in_thread, stored, stored_results

PATHS = ["send", "stream", "asend", "astream"]


class Deps:
    """What the tests hand a chat as its deps: the contexts its tools saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, ToolContext[Deps]]] = []


def look(city: str, ctx: ToolContext[Deps]) -> str:
    """Look a city up (sync).

    Args:
        city: The city's name.
    """
    ctx.deps.seen.append(("sync", ctx))
    ctx.logger.info("looking up {}", city)
    return f"{city} found"


async def alook(city: str, context: ToolContext[Deps]) -> str:
    """Look a city up (async).

    Args:
        city: The city's name.
    """
    context.deps.seen.append(("async", context))
    context.logger.info("looking up {}", city)
    return f"{city} found"


def tool_use(call_id: str, name: str, city: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": {"city": city}}


def asks(*uses: dict[str, Any]) -> dict[str, Any]:
    return anthropic_message(None, content=uses, stop_reason="tool_use")


def anthropic_agent(provider: MockProvider, tools: list[Any], **kwargs: Any) -> Agent:
    spec = fake_spec(id="claude-test", provider="anthropic")
    client = AnthropicClient(
        spec,
        client=mock_anthropic_sdk(provider),
        async_client=mock_async_anthropic_sdk(provider),
    )
    return Agent(client, tools=tools, output=OutputSize.STANDARD, depth=Depth.IMMEDIATE, **kwargs)


def turn(chat: Chat, path: str, text: str) -> Reply:
    """One whole turn on ``path``; its reply."""
    if path == "send":
        return chat.send(text)
    if path == "stream":
        done = list(chat.stream(text))[-1]
    elif path == "asend":
        return asyncio.run(chat.asend(text))
    else:

        async def events() -> list[Any]:
            return [e async for e in chat.astream(text)]

        done = asyncio.run(events())[-1]
    assert isinstance(done, TurnDone)
    return done.reply


@pytest.fixture
def extras() -> Iterator[list[dict[str, Any]]]:
    """The ``extra`` of every record logged meanwhile."""
    seen: list[dict[str, Any]] = []
    sink = logger.add(lambda message: seen.append(dict(message.record["extra"])), level="INFO")
    yield seen
    logger.remove(sink)


@pytest.mark.parametrize("path", PATHS)
def test_a_tool_taking_a_context_learns_its_user_conversation_turn_call_and_deps(
    service: ConversationService, path: str, extras: list[dict[str, Any]]
) -> None:
    provider = MockProvider(
        asks(tool_use("toolu_a", "look", "Paris"), tool_use("toolu_b", "alook", "Rome")),
        anthropic_message("Both found."),
        asks(tool_use("toolu_c", "alook", "Oslo")),
        anthropic_message("Found."),
    )
    deps = Deps()
    chat = anthropic_agent(provider, [look, alook]).chat(service, user_id="alice", deps=deps)
    assert turn(chat, path, "Paris and Rome?").text == "Both found."
    assert turn(chat, path, "Oslo?").text == "Found."

    by_call = {ctx.call_id: (kind, ctx) for kind, ctx in deps.seen}
    assert {c: kind for c, (kind, _) in by_call.items()} == {
        "toolu_a": "sync",
        "toolu_b": "async",
        "toolu_c": "async",
    }
    first, second, third = (by_call[c][1] for c in ("toolu_a", "toolu_b", "toolu_c"))
    for ctx in (first, second, third):
        assert (ctx.user_id, ctx.conversation_id) == ("alice", chat.conversation_id)
        assert ctx.deps is deps and not ctx.is_cancelled()
    assert first.turn_id == second.turn_id != third.turn_id
    assert len({first.idempotency_key, second.idempotency_key, third.idempotency_key}) == 3
    bound = [e for e in extras if e.get("call_id") in by_call]
    assert sorted((e["call_id"], e["turn_id"], e["conversation_id"]) for e in bound) == [
        (ctx.call_id, ctx.turn_id, chat.conversation_id) for ctx in (first, second, third)
    ]
    for body in provider.bodies:  # the model is told of the city only
        for tool in body["tools"]:
            assert tool["input_schema"]["properties"].keys() == {"city"}
            assert tool["input_schema"]["required"] == ["city"]


def test_the_idempotency_key_is_the_same_when_the_same_call_runs_again(
    service: ConversationService,
) -> None:
    """A call run again (the same call id of the same conversation, as a turn resumed after a
    crash would run it) gets the same key in a later turn; another call a different one."""
    one_call: list[str | LLMResponse] = [calls(("look", {"city": "Paris"})), "Done."]
    deps = Deps()
    agent = Agent(
        ScriptedClient(one_call * 3),
        tools=[look],
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )
    chat = agent.chat(service, user_id="alice", deps=deps)
    chat.send("Paris?")
    chat.send("Paris again?")
    other = agent.chat(service, user_id="alice", deps=deps)
    other.send("Paris, elsewhere?")  # a new conversation: the same call id, another call
    (_, first), (_, again), (_, elsewhere) = deps.seen
    assert first.call_id == again.call_id == elsewhere.call_id == "call_1_look"
    assert first.turn_id != again.turn_id
    assert first.idempotency_key == again.idempotency_key != elsewhere.idempotency_key


def test_a_chat_without_deps_gives_none_and_tools_without_a_context_run_as_before(
    service: ConversationService,
) -> None:
    got: list[object] = []

    def plain(city: str) -> str:
        """A tool that takes no context.

        Args:
            city: The city's name.
        """
        return f"plain {city}"

    def nosy(city: str, ctx: ToolContext[None]) -> str:
        """A tool that takes one.

        Args:
            city: The city's name.
        """
        got.append(ctx.deps)
        return f"nosy {city}"

    script: list[str | LLMResponse] = [
        calls(("plain", {"city": "Rome"}), ("nosy", {"city": "Rome"})),
        "Done.",
    ]
    agent = Agent(
        ScriptedClient(script),
        tools=[plain, nosy],
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )
    chat = agent.chat(service, user_id="alice")
    chat.send("Rome?")
    results = stored_results(stored(service, chat.conversation_id, "alice"))
    assert [(r.content, r.is_error) for r in results] == [
        ("plain Rome", False),
        ("nosy Rome", False),
    ]
    assert got == [None]


# -- cancellation -------------------------------------------------------------------------------


def test_a_running_sync_tool_sees_its_turn_force_released(service: ConversationService) -> None:
    started = threading.Event()
    saw: list[tuple[bool, str | None]] = []

    def wait_for_it(ctx: ToolContext[None]) -> str:
        """Works until its turn is cancelled."""
        started.set()
        saw.append((ctx.cancelled.wait(10), ctx.cancelled.reason))
        return "stopped"

    agent = Agent(
        ScriptedClient([calls(("wait_for_it", {}))]),
        tools=[wait_for_it],
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )
    chat = agent.chat(service, user_id="alice")
    thread, raised = send_in_thread(chat, "Go")
    assert started.wait(10)
    service.force_release(chat.conversation_id, "alice")
    thread.join(10)
    assert saw == [(True, "Conversation force-released by alice")]
    assert len(raised) == 1 and isinstance(raised[0], TurnCancelledError)


@pytest.mark.parametrize("how", ["force_release", "task_cancel"])
def test_running_async_and_sync_tools_see_their_turn_cancelled_on_the_async_path(
    service: ConversationService, how: str
) -> None:
    both = threading.Barrier(3, timeout=10)  # the two tools and the test
    saw: dict[str, bool] = {}
    sync_done = threading.Event()  # the turn does not wait for a sync tool it gave up

    def sync_wait(ctx: ToolContext[None]) -> str:
        """Works in a thread until its turn is cancelled."""
        both.wait()
        saw["sync"] = ctx.cancelled.wait(10)
        sync_done.set()
        return "stopped"

    async def async_wait(ctx: ToolContext[None]) -> str:
        """Works on the loop until its turn is cancelled."""
        try:  # the cancel may land while the barrier's thread returns: still inside the try
            await asyncio.to_thread(both.wait)
            await ctx.cancelled.wait_async()
        finally:  # a cancelled turn cancels this task too: it learns why first
            saw["async"] = ctx.is_cancelled()
        return "stopped"

    agent = Agent(
        ScriptedClient([calls(("sync_wait", {}), ("async_wait", {}))]),
        tools=[sync_wait, async_wait],
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )
    chat = agent.chat(service, user_id="alice")

    async def main() -> BaseException | None:
        task = asyncio.ensure_future(chat.asend("Go"))
        await asyncio.to_thread(both.wait)
        if how == "force_release":
            await asyncio.to_thread(service.force_release, chat.conversation_id, "alice")
        else:
            task.cancel()
        try:
            await task
        except BaseException as exc:
            return exc
        return None

    raised = asyncio.run(main())
    expected = TurnCancelledError if how == "force_release" else asyncio.CancelledError
    assert isinstance(raised, expected)
    assert sync_done.wait(10)
    assert saw == {"sync": True, "async": True}


def test_a_tool_past_its_timeout_sees_its_call_given_up(service: ConversationService) -> None:
    saw = threading.Event()

    def slow(ctx: ToolContext[None]) -> str:
        """Works until it is given up."""
        if ctx.cancelled.wait(10) and "timeout" in (ctx.cancelled.reason or ""):
            saw.set()
        return "late"

    agent = Agent(
        ScriptedClient([calls(("slow", {}))]),
        tools=[slow],
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
        tool_timeout_s=0.05,
    )
    chat = agent.chat(service, user_id="alice")
    chat.send("Go")
    assert saw.wait(10)
    (result,) = stored_results(stored(service, chat.conversation_id, "alice"))
    assert result.is_error and "timeout" in result.content
