"""Killing a turn's process mid-step, for the crash tests: a child Python process runs a
turn, says where it is on its standard output and blocks; the parent reads what it said and
kills it with SIGKILL (no handler runs, no file is closed: as a crash)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from parlour.actors import Agent, ConversationService
from parlour.runtime import Depth, LLMClient, OutputSize
from parlour.runtime.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.snapshots import ConversationPersistenceSnapshot
from parlour.stores import PersistentStore

MID_TOOL = textwrap.dedent(
    """
    import sys

    from parlour.actors import Agent, ConversationService
    from parlour.runtime import Depth, OutputSize, ScriptedClient
    from parlour.runtime.testing import scripted_tool_calls
    from parlour.stores import LmdbStore, PostgresStore


    def lookup(order_id: str) -> str:
        '''Look an order up.

        Args:
            order_id: the order.
        '''
        print("tool started", flush=True)
        sys.stdin.readline()  # never answered: the parent kills this process here
        return "shipped"


    kind, where = sys.argv[1], sys.argv[2]
    store = LmdbStore(where) if kind == "lmdb" else PostgresStore(where)
    model = ScriptedClient([scripted_tool_calls(("lookup", {"order_id": "42"}))])
    agent = Agent(model, tools=[lookup], output=OutputSize.COMPACT, depth=Depth.IMMEDIATE)
    with store, ConversationService(store) as service:
        chat = agent.chat(service, user_id="alice")
        print(chat.conversation_id, flush=True)
        chat.send("Where is order 42?")
    """
)
"""A turn of user ``alice`` on ``lmdb`` or ``postgres`` store ``argv[2]``: it prints the
conversation's id, then ``tool started`` from inside its one tool call, ``lookup``."""


def lookup(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: the order.
    """
    return f"order {order_id} shipped"


def recover_mid_tool(
    store: PersistentStore, model: LLMClient, conversation_id: str, go: str
) -> ConversationPersistenceSnapshot:
    """Go on with ``go`` (a new message, or ``resume``) on the conversation ``MID_TOOL``
    left in ``store``, answered by ``model`` with "It shipped yesterday."; the stored record."""
    agent = Agent(model, tools=[lookup], output=OutputSize.COMPACT, depth=Depth.IMMEDIATE)
    with ConversationService(store) as service:
        chat = agent.chat(service, user_id="alice", conversation_id=conversation_id)
        assert chat.interrupted  # the stored record ends with the unanswered call
        reply = chat.resume() if go == "resume" else chat.send("Hello again?")
        assert reply.text == "It shipped yesterday."
        assert not chat.interrupted
    stored = store.load(conversation_id, "alice")
    assert stored is not None
    return stored


def saved_once_and_paired(stored: ConversationPersistenceSnapshot) -> None:
    """The question and the call ``MID_TOOL`` saved before the kill are there once each,
    and the call has exactly one result."""
    blocks = [b for m in stored.messages for b in m.blocks]
    texts = [b.text for b in blocks if isinstance(b, TextBlock)]
    assert texts.count("Where is order 42?") == 1
    calls = [b for b in blocks if isinstance(b, ToolUseBlock)]
    assert len(calls) == 1
    results = [b for b in blocks if isinstance(b, ToolResultBlock)]
    assert [r.tool_use_id for r in results] == [calls[0].id]


def killed_after(code: str, args: list[str], last: str) -> list[str]:
    """Run ``code`` in a child process with ``args``, read its output lines up to the line
    ``last``, kill it with SIGKILL there, and return the lines before ``last``."""
    with subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None
        said: list[str] = []
        try:
            while (line := child.stdout.readline().strip()) != last:
                assert line, f"the child ended before it said {last!r}: {said}"
                said.append(line)
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    return said
