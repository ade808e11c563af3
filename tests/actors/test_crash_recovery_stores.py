"""A process killed (``kill -9``) while its tool runs leaves a conversation the next
process recovers on any store and in any dialect: on PostgreSQL (the child and the recovery
each on their own ``PostgresStore`` over the same database), and on LMDB through Bedrock's
Converse API, whose request alternates roles and answers the interrupted call (text tool
dialect: the call in the assistant's envelope) first thing in the very next message.

The turn runs in a real child process; the recovery runs here, through the real SDKs over
their offline transports (Anthropic's double; a real boto3 client whose ``ConverseStream``
request is serialized and answered at its send hook). The
PostgreSQL test needs a server named by ``PARLOUR_TEST_POSTGRES`` and is skipped without one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parlour.runtime.providers import AnthropicClient, BedrockClient, parse_tool_calls
from parlour.runtime.testing import (
    ConverseStreamMock,
    MockProvider,
    anthropic_message,
    converse_stream_events,
    dummy_bedrock_client,
    fake_spec,
    mock_anthropic_sdk,
)
from parlour.stores import LmdbStore, PostgresStore

from .kills import (
    MID_TOOL,
    killed_after,
    postgres_schema,
    recover_mid_tool,
    saved_once_and_paired,
)

USER = "alice"


def _killed_mid_tool(kind: str, where: str) -> str:
    """Run a turn in a child process on the store ``kind`` at ``where``, kill it while its
    tool runs, and return the conversation's id."""
    [conversation_id] = killed_after(MID_TOOL, [kind, where], "tool started")
    return conversation_id


@pytest.fixture
def postgres_conninfo() -> Iterator[str]:
    """A schema of this test's own on the server ``PARLOUR_TEST_POSTGRES`` names."""
    with postgres_schema() as conninfo:
        yield conninfo


@pytest.mark.slow
@pytest.mark.parametrize("go", ["send", "resume"])
def test_a_process_killed_mid_tool_on_postgresql_recovers_in_another_process(
    postgres_conninfo: str, go: str
) -> None:
    conversation_id = _killed_mid_tool("postgres", postgres_conninfo)
    server = MockProvider(anthropic_message("It shipped yesterday."))
    model = AnthropicClient("claude-sonnet-4-5", client=mock_anthropic_sdk(server))
    with PostgresStore(postgres_conninfo) as store:
        stored = recover_mid_tool(store, model, conversation_id, go)
    messages = server.last_body["messages"]
    shape = [m["role"] + ":" + ",".join(b["type"] for b in m["content"]) for m in messages]
    assert shape[:3] == ["user:text", "assistant:tool_use", "user:tool_result"]
    result = messages[2]["content"][0]
    assert result["tool_use_id"] == messages[1]["content"][0]["id"] and result["is_error"]
    assert "interrupted" in str(result["content"])
    saved_once_and_paired(stored)


@pytest.mark.slow
@pytest.mark.parametrize("go", ["send", "resume"])
def test_a_process_killed_mid_tool_recovers_through_bedrock_with_the_call_paired(
    tmp_path: Path, go: str
) -> None:
    conversation_id = _killed_mid_tool("lmdb", str(tmp_path / "db"))
    boto = dummy_bedrock_client()
    bedrock = ConverseStreamMock(boto, converse_stream_events("It shipped yesterday."))
    spec = fake_spec(
        id="anthropic.claude-test-v1:0", provider="bedrock", supports_prompt_caching=False
    )
    with LmdbStore(tmp_path / "db") as store:
        stored = recover_mid_tool(store, BedrockClient(spec, client=boto), conversation_id, go)
    [request] = bedrock.bodies  # the JSON body boto3 serialized, as it would have sent it
    messages: list[dict[str, Any]] = request["messages"]
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant", "user"]  # alternating: Converse refuses otherwise
    # Converse carries tool traffic as text here: the call in the assistant's envelope,
    # its result as the first text of the very next (user) message
    said = "".join(c.get("text", "") for c in messages[1]["content"])
    [call] = parse_tool_calls(said)
    assert call.name == "lookup"
    result = messages[2]["content"][0]["text"]
    assert result == (
        f"Tool error for {call.id}: The call to lookup was interrupted before it returned a "
        "result, so its outcome is unknown."
    )
    texts = [c.get("text", "") for m in messages for c in m["content"]]
    assert sum(t.startswith(("Tool error for", "Tool result for")) for t in texts) == 1
    if go == "send":
        assert messages[2]["content"][-1] == {"text": "Hello again?"}
    saved_once_and_paired(stored)
