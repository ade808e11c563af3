"""A process killed (``kill -9``) while its tool runs leaves a conversation every provider
still accepts: the next request answers the interrupted call, a new message or ``resume``
goes on from the last durable step, and nothing saved before the kill is lost.

The turn runs in a real child process on a real LmdbStore; the recovery runs here, through
the real Anthropic and OpenAI SDKs over their offline transports (the suite's conftest
checks every body sent against the SDK's request type)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from parlour.runtime import LLMClient
from parlour.runtime.providers import AnthropicClient, OpenAIClient
from parlour.runtime.testing import (
    MockProvider,
    anthropic_message,
    mock_anthropic_sdk,
    mock_openai_sdk,
    openai_completion,
)
from parlour.stores import LmdbStore

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
