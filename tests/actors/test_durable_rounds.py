"""Each finished tool result is durable as its call finishes: a round's results message is
added by the first result and joined by the others, each saved before the turn goes on; a
process killed (``kill -9``) while one call of a round still runs keeps the others'
results, never runs them again, and gives the one left the interrupted result; a resumed
turn runs again the interrupted calls of tools declared safe to run again.

The killed turn runs in a real child process on a real LmdbStore; the recovery runs here,
through the real Anthropic and OpenAI SDKs over their offline transports."""

from __future__ import annotations

import asyncio
import shutil
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from parlour.actors import Agent, ConversationService, Recovered, ToolCallFinished
from parlour.runtime import (
    Depth,
    FunctionTool,
    LLMClient,
    OutputSize,
    ScriptedClient,
    ToolContext,
    is_interrupted_result,
    tool_from_function,
)
from parlour.runtime.blocks import ToolResultBlock, ToolUseBlock
from parlour.runtime.providers import AnthropicClient, OpenAIClient
from parlour.runtime.testing import (
    MockProvider,
    anthropic_message,
    mock_anthropic_sdk,
    mock_openai_sdk,
    openai_completion,
    scripted_tool_calls,
)
from parlour.stores import LmdbStore

from .kills import killed_after

USER = "alice"

# the child: three parallel calls; "three" blocks until the others' results are committed
CHILD = textwrap.dedent(
    """
    import sys
    import threading
    from pathlib import Path

    from parlour.actors import Agent, ConversationService
    from parlour.runtime import Depth, OutputSize, ScriptedClient, ToolContext
    from parlour.runtime.blocks import ToolResultBlock
    from parlour.runtime.testing import scripted_tool_calls
    from parlour.stores import LmdbStore

    runs = Path(sys.argv[2])
    saved = threading.Condition()
    CID = []


    class WatchedStore(LmdbStore):
        def save_context(self, *args, **kwargs):
            return self._told(super().save_context(*args, **kwargs))

        def append_context(self, *args, **kwargs):
            return self._told(super().append_context(*args, **kwargs))

        def _told(self, version):
            with saved:
                saved.notify_all()
            return version


    def results_stored():
        snapshot = store.load(CID[0], "alice")
        return sum(isinstance(b, ToolResultBlock) for m in snapshot.messages for b in m.blocks)


    def one() -> str:
        '''The first.'''
        with open(runs / "one", "a") as f:
            f.write("run\\n")
        return "one done"


    def two() -> str:
        '''The second.'''
        with open(runs / "two", "a") as f:
            f.write("run\\n")
        return "two done"


    def three(context: ToolContext) -> str:
        '''The third.'''
        with open(runs / "three", "a") as f:
            f.write(context.idempotency_key + "\\n")
        with saved:
            assert saved.wait_for(lambda: results_stored() == 2, timeout=60)
        print("three blocked", flush=True)
        sys.stdin.readline()  # never answered: the parent kills this process here
        return "three done"


    model = ScriptedClient([scripted_tool_calls(("one", {}), ("two", {}), ("three", {}))])
    agent = Agent(model, tools=[one, two, three], output=OutputSize.COMPACT, depth=Depth.IMMEDIATE)
    with WatchedStore(sys.argv[1]) as store, ConversationService(store) as service:
        chat = agent.chat(service, user_id="alice")
        CID.append(chat.conversation_id)
        print(chat.conversation_id, flush=True)
        chat.send("Run all three.")
    """
)


@pytest.fixture(scope="module")
def killed_mid_round(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A store whose process was killed while the third of three parallel calls ran, after
    the other two finished; and the folder where each tool noted its runs."""
    base = tmp_path_factory.mktemp("killed-round")
    data, runs = base / "db", base / "runs"
    runs.mkdir()
    [conversation_id] = killed_after(CHILD, [str(data), str(runs)], "three blocked")
    return data, runs, conversation_id


def _recovery_tools(runs: Path, *, rerun: bool) -> list[Any]:
    """The parent's tools, noting their runs where the child's did."""

    def one() -> str:
        """The first."""
        with open(runs / "one", "a") as f:
            f.write("run\n")
        return "one done"

    def two() -> str:
        """The second."""
        with open(runs / "two", "a") as f:
            f.write("run\n")
        return "two done"

    def three(context: ToolContext[Any]) -> str:
        """The third."""
        with open(runs / "three", "a") as f:
            f.write(context.idempotency_key + "\n")
        return "three done"

    return [one, two, tool_from_function(three, rerun_on_recovery=rerun)]


def _anthropic(server: MockProvider) -> LLMClient:
    return AnthropicClient("claude-sonnet-4-5", client=mock_anthropic_sdk(server))


def _openai(server: MockProvider) -> LLMClient:
    return OpenAIClient("gpt-5-mini", client=mock_openai_sdk(server))


PROVIDERS: dict[str, tuple[Callable[[MockProvider], LLMClient], Callable[[], Any]]] = {
    "anthropic": (_anthropic, lambda: anthropic_message("All three ran.")),
    "openai": (_openai, lambda: openai_completion("All three ran.")),
}


def _copy(killed: tuple[Path, Path, str], tmp_path: Path) -> tuple[Path, Path, str]:
    data, runs, conversation_id = killed
    shutil.copytree(data, tmp_path / "db")
    shutil.copytree(runs, tmp_path / "runs")
    return tmp_path / "db", tmp_path / "runs", conversation_id


def _lines(runs: Path, name: str) -> list[str]:
    return (runs / name).read_text().splitlines() if (runs / name).exists() else []


def _tool_results(body: dict[str, Any], provider: str) -> dict[str, tuple[str, bool]]:
    """Each tool result the request carries: its call's name, by the call's id, to its
    content and whether it is an error; asserting they follow the calls' message."""
    if provider == "anthropic":
        messages = body["messages"]
        at = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
        names = {b["id"]: b["name"] for b in messages[at]["content"] if b["type"] == "tool_use"}
        answer = messages[at + 1]
        assert answer["role"] == "user"
        results = [b for b in answer["content"] if b["type"] == "tool_result"]
        assert sorted(r["tool_use_id"] for r in results) == sorted(names)
        return {names[r["tool_use_id"]]: (str(r["content"]), r["is_error"]) for r in results}
    messages = [m for m in body["messages"] if m["role"] != "system"]
    at = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    names = {c["id"]: c["function"]["name"] for c in messages[at]["tool_calls"]}
    tools = messages[at + 1 : at + 1 + len(names)]
    assert [m["role"] for m in tools] == ["tool"] * len(names)
    assert sorted(m["tool_call_id"] for m in tools) == sorted(names)
    return {
        names[m["tool_call_id"]]: (str(m["content"]), "interrupted" in m["content"]) for m in tools
    }


@pytest.mark.slow
@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_process_killed_mid_round_keeps_the_finished_results_and_never_runs_them_again(
    killed_mid_round: tuple[Path, Path, str], tmp_path: Path, provider: str
) -> None:
    data, runs, conversation_id = _copy(killed_mid_round, tmp_path)
    with LmdbStore(data) as store:
        stored = store.load(conversation_id, USER)
    assert stored is not None  # the record as the kill left it: two results of three
    kept = [b for m in stored.messages for b in m.blocks if isinstance(b, ToolResultBlock)]
    assert sorted(r.content for r in kept) == ["one done", "two done"]
    make, answer = PROVIDERS[provider]
    server = MockProvider(answer())
    agent = Agent(
        make(server),
        tools=_recovery_tools(runs, rerun=False),
        output=OutputSize.COMPACT,
        depth=Depth.IMMEDIATE,
    )
    with LmdbStore(data) as store, ConversationService(store) as service:
        chat = agent.chat(service, user_id=USER, conversation_id=conversation_id)
        assert chat.interrupted
        reply = chat.resume()
    assert reply.text == "All three ran."
    assert reply.recovered is not None and reply.recovered.rerun == []
    results = _tool_results(server.last_body, provider)
    assert results["one"] == ("one done", False) and results["two"] == ("two done", False)
    assert "interrupted" in results["three"][0] and results["three"][1]
    assert _lines(runs, "one") == ["run"] and _lines(runs, "two") == ["run"]
    assert len(_lines(runs, "three")) == 1  # started once, in the killed process


@pytest.mark.slow
@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_resume_runs_an_interrupted_call_of_a_tool_safe_to_run_again_once_more(
    killed_mid_round: tuple[Path, Path, str], tmp_path: Path, provider: str
) -> None:
    data, runs, conversation_id = _copy(killed_mid_round, tmp_path)
    make, answer = PROVIDERS[provider]
    server = MockProvider(answer())
    agent = Agent(
        make(server),
        tools=_recovery_tools(runs, rerun=True),
        output=OutputSize.COMPACT,
        depth=Depth.IMMEDIATE,
    )
    with LmdbStore(data) as store, ConversationService(store) as service:
        chat = agent.chat(service, user_id=USER, conversation_id=conversation_id)
        reply = chat.resume()
        assert not chat.interrupted
        stored = store.load(conversation_id, USER)
    assert reply.text == "All three ran."
    assert stored is not None
    calls = {b.name: b.id for m in stored.messages for b in m.blocks if isinstance(b, ToolUseBlock)}
    assert reply.recovered is not None
    assert reply.recovered.rerun == [calls["three"]] and reply.recovered.interrupted == []
    results = _tool_results(server.last_body, provider)
    assert results == {
        "one": ("one done", False),
        "two": ("two done", False),
        "three": ("three done", False),
    }
    starts = _lines(runs, "three")
    assert len(starts) == 2 and starts[0] == starts[1]  # the same idempotency key both times
    assert _lines(runs, "one") == ["run"] and _lines(runs, "two") == ["run"]
    stored_results = [
        b for m in stored.messages for b in m.blocks if isinstance(b, ToolResultBlock)
    ]
    assert len(stored_results) == 3
    assert not any(is_interrupted_result(r, "three") for r in stored_results)


# -- in one process: each result is committed as its call finishes ------------------------------


class WatchedStore(LmdbStore):
    """A real LmdbStore that tells waiters each time a save committed."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.saved = threading.Condition()

    def save_context(self, *args: Any, **kwargs: Any) -> int:
        return self._told(super().save_context(*args, **kwargs))

    def append_context(self, *args: Any, **kwargs: Any) -> int:
        return self._told(super().append_context(*args, **kwargs))

    def save_context_async(self, *args: Any, **kwargs: Any) -> Any:
        return self._told_later(super().save_context_async(*args, **kwargs))

    def append_context_async(self, *args: Any, **kwargs: Any) -> Any:
        return self._told_later(super().append_context_async(*args, **kwargs))

    def _told(self, version: int) -> int:
        with self.saved:
            self.saved.notify_all()
        return version

    def _told_later(self, saving: Any) -> Any:
        saving.add_done_callback(lambda done: self._told(0))  # once its commit answered
        return saving


def _round_agent(store: WatchedStore, seen: list[list[str]]) -> Agent:
    """Three parallel calls; the third waits until the store holds its siblings' results,
    and notes what it found there."""

    def first() -> str:
        """The first."""
        return "first done"

    def second() -> str:
        """The second."""
        return "second done"

    def third(context: ToolContext[Any]) -> str:
        """The third."""

        def stored() -> list[str]:
            snapshot = store.load(context.conversation_id, USER)
            assert snapshot is not None
            blocks = [b for m in snapshot.messages for b in m.blocks]
            return [b.content for b in blocks if isinstance(b, ToolResultBlock)]

        with store.saved:
            assert store.saved.wait_for(lambda: len(stored()) == 2, timeout=60)
        seen.append(stored())
        return "third done"

    model = ScriptedClient(
        [scripted_tool_calls(("first", {}), ("second", {}), ("third", {})), "Done."]
    )
    return Agent(
        model, tools=[first, second, third], output=OutputSize.COMPACT, depth=Depth.IMMEDIATE
    )


@pytest.mark.parametrize("driver", ["send", "asend"])
def test_each_finished_result_of_a_round_is_committed_before_its_siblings_finish(
    tmp_path: Path, driver: str
) -> None:
    seen: list[list[str]] = []
    store = WatchedStore(tmp_path / "db")
    with store, ConversationService(store) as service:
        agent = _round_agent(store, seen)
        chat = agent.chat(service, user_id=USER)
        if driver == "send":
            reply = chat.send("Run all three.")
        else:
            reply = asyncio.run(chat.asend("Run all three."))
        stored = store.load(chat.conversation_id, USER)
    assert reply.text == "Done." and reply.recovered is None
    assert seen == [["first done", "second done"]]
    assert stored is not None
    # the round's results: one message, in call order, as a round that never crashed
    answers = [m for m in stored.messages if any(isinstance(b, ToolResultBlock) for b in m.blocks)]
    assert len(answers) == 1
    contents = [b.content for b in answers[0].blocks if isinstance(b, ToolResultBlock)]
    assert contents == ["first done", "second done", "third done"]


def test_the_events_of_a_round_report_every_result_in_call_order(tmp_path: Path) -> None:
    seen: list[list[str]] = []
    store = WatchedStore(tmp_path / "db")
    with store, ConversationService(store) as service:
        chat = _round_agent(store, seen).chat(service, user_id=USER)
        events = list(chat.stream("Run all three."))
    finished = [e.name for e in events if isinstance(e, ToolCallFinished)]
    assert finished == ["first", "second", "third"]
    assert not any(isinstance(e, Recovered) for e in events)


def test_rerun_on_recovery_must_name_a_tool_of_the_agent() -> None:
    def lookup() -> str:
        """Look."""
        return "found"

    with pytest.raises(ValueError, match="nowhere"):
        Agent(ScriptedClient(["Hi."]), tools=[lookup], rerun_on_recovery={"nowhere"})
    agent = Agent(ScriptedClient(["Hi."]), tools=[lookup], rerun_on_recovery={"lookup"})
    assert agent.tools.rerun == {"lookup"}
    assert isinstance(agent.tools.tools["lookup"], FunctionTool)
