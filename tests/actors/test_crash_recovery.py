"""A process killed (``kill -9``) while its tool runs leaves a conversation every provider
still accepts: the next request answers the interrupted call, a new message or ``resume``
goes on from the last durable step, and nothing saved before the kill is lost.

The turn runs in a real child process on a real LmdbStore; the recovery runs here, through
the real Anthropic and OpenAI SDKs over their offline transports (the suite's conftest
checks every body sent against the SDK's request type)."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from parlour.runtime import LLMClient
from parlour.runtime.blocks import ToolResultBlock
from parlour.runtime.providers import AnthropicClient, OpenAIClient
from parlour.runtime.testing import (
    MockProvider,
    anthropic_message,
    mock_anthropic_sdk,
    mock_openai_sdk,
    openai_completion,
)
from parlour.stores import LmdbStore
from tests.runtime.providers._sent_bodies import check_request

from .kills import MID_TOOL, killed_after, recover_mid_tool, saved_once_and_paired

USER = "alice"


@pytest.fixture(scope="module")
def killed_mid_tool(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A store whose only conversation's process was killed while its tool ran."""
    data = tmp_path_factory.mktemp("killed") / "db"
    [conversation_id] = killed_after(MID_TOOL, ["lmdb", str(data)], "tool started")
    return data, conversation_id


def _anthropic(server: MockProvider) -> LLMClient:
    return AnthropicClient("claude-sonnet-4-5", client=mock_anthropic_sdk(server))


def _openai(server: MockProvider) -> LLMClient:
    return OpenAIClient("gpt-5-mini", client=mock_openai_sdk(server))


PROVIDERS: dict[str, tuple[Callable[[MockProvider], LLMClient], Callable[[], Any]]] = {
    "anthropic": (_anthropic, lambda: anthropic_message("It shipped yesterday.")),
    "openai": (_openai, lambda: openai_completion("It shipped yesterday.")),
}


def _recover(killed: tuple[Path, str], tmp_path: Path, provider: str, go: str) -> Any:
    """Open a copy of the killed process's store, go on with ``go`` (a new message, or
    ``resume``), and return what the provider was sent and the stored conversation."""
    data, conversation_id = killed
    copy = tmp_path / "db"
    shutil.copytree(data, copy)
    make, answer = PROVIDERS[provider]
    server = MockProvider(answer())
    with LmdbStore(copy) as store:
        stored = recover_mid_tool(store, make(server), conversation_id, go)
    return server.last_body, stored


def _anthropic_shape(body: dict[str, Any]) -> list[str]:
    return [m["role"] + ":" + ",".join(b["type"] for b in m["content"]) for m in body["messages"]]


@pytest.mark.slow
@pytest.mark.parametrize("go", ["send", "resume"])
@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_process_killed_mid_tool_leaves_a_conversation_the_provider_accepts(
    killed_mid_tool: tuple[Path, str], tmp_path: Path, provider: str, go: str
) -> None:
    body, stored = _recover(killed_mid_tool, tmp_path, provider, go)
    if provider == "anthropic":
        shape = _anthropic_shape(body)
        assert shape[:3] == ["user:text", "assistant:tool_use", "user:tool_result"] or shape[
            :3
        ] == ["user:text", "assistant:text,tool_use", "user:tool_result"]
        call = next(b for b in body["messages"][1]["content"] if b["type"] == "tool_use")
        result = body["messages"][2]["content"][0]
        assert result["tool_use_id"] == call["id"] and result["is_error"] is True
        assert "interrupted" in str(result["content"])
        if go == "send":
            assert body["messages"][-1]["content"][-1] == {"type": "text", "text": "Hello again?"}
    else:
        messages = [m for m in body["messages"] if m["role"] != "system"]
        roles = [m["role"] for m in messages]
        assert roles[:3] == ["user", "assistant", "tool"]
        assert messages[2]["tool_call_id"] == messages[1]["tool_calls"][0]["id"]
        assert "interrupted" in str(messages[2]["content"])
        assert roles[3:] == (["user"] if go == "send" else [])
    saved_once_and_paired(stored)


# -- the reproduction the issue gives, run as written -------------------------------------------

REPRODUCTION = '''\
import sys, time
from parlour.actors import Agent, ConversationService
from parlour.runtime import Depth, OutputSize, ScriptedClient
from parlour.runtime.providers import AnthropicClient
from parlour.runtime.testing import MockProvider, anthropic_message, mock_anthropic_sdk, scripted_tool_calls
from parlour.stores import LmdbStore

def slow(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: the order.
    """
    time.sleep(30)
    return "shipped"

crash = sys.argv[1] == "crash"
server = MockProvider(anthropic_message("ok"))
client = (ScriptedClient([scripted_tool_calls(("slow", {"order_id": "42"}))]) if crash
          else AnthropicClient("claude-sonnet-4-5", client=mock_anthropic_sdk(server)))
agent = Agent(client, tools=[slow], output=OutputSize.COMPACT, depth=Depth.IMMEDIATE)
with LmdbStore("crash-data") as store, ConversationService(store) as service:
    chat = agent.chat(service, user_id="alice", conversation_id=None if crash else open("cid").read())
    open("cid", "w").write(chat.conversation_id)
    chat.send("Where is order 42?" if crash else "Hello again?")
    print([m["role"] + ":" + ",".join(b["type"] for b in m["content"]) for m in server.last_body["messages"]])
'''  # noqa: E501 (as the issue wrote it)

# Runs crash.py as ``python crash.py crash`` would, saying when its tool starts to sleep (in
# place of the issue's ``sleep 3``: the kill comes while the tool sleeps, not after a guess).
CRASH = """
import runpy, sys, time
sleep = time.sleep
time.sleep = lambda seconds: (print("tool sleeping", flush=True), sleep(seconds))
sys.argv = ["crash.py", "crash"]
runpy.run_path("crash.py", run_name="__main__")
"""

# Runs ``python crash.py resume``, then tells the request it printed the shape of, whole.
RESUME = """
import json, runpy, sys
sys.argv = ["crash.py", "resume"]
ran = runpy.run_path("crash.py", run_name="__main__")
print(json.dumps(ran["server"].last_body))
"""


@pytest.mark.slow
def test_the_issues_reproduction_killed_while_its_tool_sleeps_then_resumed_sends_the_call_answered(
    tmp_path: Path,
) -> None:
    (tmp_path / "crash.py").write_text(REPRODUCTION)
    # the script keeps its store and its "cid" file where it runs
    assert killed_after(CRASH, [], "tool sleeping", cwd=tmp_path) == []
    resumed = subprocess.run(
        [sys.executable, "-c", RESUME],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    printed, sent = resumed.stdout.strip().splitlines()
    shape = ast.literal_eval(printed)
    # the interrupted call is answered first thing after it, then comes the new message (in
    # the same user turn or the next: Anthropic joins consecutive user messages)
    assert shape in (
        ["user:text", "assistant:tool_use", "user:tool_result,text"],
        ["user:text", "assistant:tool_use", "user:tool_result", "user:text"],
    )
    body = json.loads(sent)
    check_request("/v1/messages", body)  # the SDK's own request type
    call = body["messages"][1]["content"][0]
    result = body["messages"][2]["content"][0]
    assert result["tool_use_id"] == call["id"] and result["is_error"] is True
    assert "interrupted" in str(result["content"])
    conversation_id = (tmp_path / "cid").read_text()
    with LmdbStore(tmp_path / "crash-data") as store:
        stored = store.load(conversation_id, USER)
    assert stored is not None
    saved_once_and_paired(stored)
    [result] = [b for m in stored.messages for b in m.blocks if isinstance(b, ToolResultBlock)]
    assert result.is_error and "interrupted" in result.content
