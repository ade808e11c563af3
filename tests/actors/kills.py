"""Killing a turn's process mid-step, for the crash tests: a child Python process runs a
turn, says where it is on its standard output and blocks; the parent reads what it said and
kills it with SIGKILL (no handler runs, no file is closed: as a crash).

The child may import this module (``from tests.actors.kills import ...``): ``killed_after``
puts the repository on its path. For it: ``stop_here`` (say where, block until killed),
``store_class`` (LMDB or PostgreSQL), and ``sdk_model``: a real provider client (Anthropic,
OpenAI, Bedrock) over its offline transport, answering scripted ``Answer`` s, one of which
it may stall: part of its stream is sent, then the transport blocks until the kill. For the
parent: ``postgres_schema`` (a fresh schema, or a skip without a server).

Why this module is long: it is the one harness the crash tests share, the child's pieces
and the parent's together, so a child program imports one module.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import httpx2
import pytest

from parlour.actors import Agent, ConversationService
from parlour.runtime import Depth, LLMClient, OutputSize
from parlour.runtime.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.providers import AnthropicClient, BedrockClient, OpenAIClient
from parlour.runtime.snapshots import ConversationPersistenceSnapshot
from parlour.runtime.testing import (
    MockProvider,
    anthropic_message,
    anthropic_sse,
    converse_stream_events,
    dummy_bedrock_client,
    encode_event,
    fake_spec,
    mock_anthropic_sdk,
    mock_async_anthropic_sdk,
    mock_async_openai_sdk,
    mock_openai_sdk,
    openai_completion,
    openai_sse,
)
from parlour.stores import LmdbStore, MemoryStore, PersistentStore, PostgresStore

ROOT = Path(__file__).resolve().parents[2]
PROVIDERS = ("anthropic", "bedrock", "openai")

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


def killed_after(code: str, args: list[str], last: str, cwd: Path | None = None) -> list[str]:
    """Run ``code`` in a child process with ``args`` (in ``cwd``, when given), read its
    output lines up to the line ``last``, kill it with SIGKILL there, and return the lines
    before ``last``."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    with subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONPATH": path},
        cwd=cwd,
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


# -- in the child: where to stop, which store ---------------------------------------------------


def say(line: str) -> None:
    """Tell the parent ``line``, in one write (threads of the child may talk at once)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def stop_here(where: str) -> NoReturn:
    """Say ``stopped <where>`` to the parent and block until it kills this process."""
    say("stopped " + where)
    sys.stdin.readline()  # never answered: the parent kills this process here
    raise SystemExit("not killed")


def store_class(kind: str) -> type[LmdbStore] | type[PostgresStore]:
    """The store of ``kind`` (``lmdb``: opened on a folder; ``postgres``: on a conninfo)."""
    return LmdbStore if kind == "lmdb" else PostgresStore


def open_store(kind: str, where: str) -> PersistentStore:
    return store_class(kind)(where)


# -- in the child: a provider that answers, and may stall mid-stream ---------------------------


@dataclass(frozen=True)
class Answer:
    """A model answer to script: its text, then its calls, each ``(id, tool, input)``."""

    text: str
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)


def anthropic_answer(answer: Answer) -> dict[str, Any]:
    uses = [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in answer.calls]
    return anthropic_message(
        None,
        content=[{"type": "text", "text": answer.text}, *uses],
        stop_reason="tool_use" if answer.calls else "end_turn",
    )


def openai_answer(answer: Answer) -> dict[str, Any]:
    calls = [{"id": i, "name": n, "arguments": json.dumps(a)} for i, n, a in answer.calls]
    finish = "tool_calls" if calls else "stop"
    return openai_completion(answer.text, tool_calls=calls, finish_reason=finish)


def bedrock_answer(answer: Answer) -> list[tuple[str, dict[str, Any]]]:
    """Converse carries calls as text: the answer's text, then the calls' JSON envelope as
    the palette asks a model to write it, with no ids (parlour numbers each call
    ``name#position``, so the same ids come back each round)."""
    text = answer.text
    if answer.calls:
        entries = [{"name": n, "input": a} for _, n, a in answer.calls]
        text += "\n" + json.dumps({"tool_calls": entries})
    return converse_stream_events(text)


def _head(data: bytes, text: Callable[[bytes], bool]) -> bytes:
    """The events of a server-sent stream up to its first piece of answer text (``text``
    tells it), as a server that stalled right after it had sent them."""
    events = data.split(b"\n\n")
    first = next(at for at, event in enumerate(events) if text(event))
    return b"\n\n".join(events[: first + 1]) + b"\n\n"


def _anthropic_text(event: bytes) -> bool:
    return b'"text_delta"' in event


def _openai_text(event: bytes) -> bool:
    data = event.removeprefix(b"data: ")
    if not data.startswith(b"{"):
        return False
    choices = json.loads(data).get("choices") or [{}]
    return bool(choices[0].get("delta", {}).get("content"))


class Shown:
    """How many text deltas the child's caller has shown: a stalled stream says where it
    stopped only once its piece of text has reached the caller."""

    def __init__(self) -> None:
        self._count = 0
        self._changed = threading.Condition()

    def one(self) -> None:
        with self._changed:
            self._count += 1
            self._changed.notify_all()

    def count(self) -> int:
        with self._changed:
            return self._count

    def wait_past(self, count: int) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: self._count > count, timeout=60)


class _Stalled(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """A response body that sends ``head``, then (once the caller has ``shown`` its text,
    when told to wait for it) stops the process where it is."""

    def __init__(self, head: bytes, where: str, shown: Shown | None) -> None:
        self.head, self.where, self.shown = head, where, shown

    def __iter__(self) -> Iterator[bytes]:
        before = self.shown.count() if self.shown else 0
        yield self.head
        if self.shown:
            self.shown.wait_past(before)
        stop_here(self.where)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        before = self.shown.count() if self.shown else 0
        yield self.head
        if self.shown:  # the loop goes on meanwhile: the caller's task shows the text
            await asyncio.to_thread(self.shown.wait_past, before)
        stop_here(self.where)  # blocks the loop too: nothing runs until the kill


class StallingProvider(MockProvider):
    """A ``MockProvider`` whose request number ``stall_at`` (from 0) gets its answer's
    stream up to the first piece of text, then no more bytes: the transport blocks until the
    process is killed."""

    def __init__(
        self, *replies: dict[str, Any], stall_at: int | None, where: str, shown: Shown | None
    ) -> None:
        super().__init__(*replies)
        self.stall_at, self.where, self.shown = stall_at, where, shown

    def __call__(self, request: Any) -> Any:
        if len(self.bodies) != self.stall_at:
            return super().__call__(request)
        body = json.loads(request.content or b"{}")
        self.bodies.append(body)
        reply = self._replies.popleft()
        assert isinstance(reply, dict)
        if not body.get("stream"):
            head = json.dumps(reply).encode()[:40]
        elif reply.get("type") == "message":
            head = _head(anthropic_sse(reply), _anthropic_text)
        else:
            head = _head(openai_sse(reply), _openai_text)
        stream = _Stalled(head, self.where, self.shown)
        type_ = "text/event-stream" if body.get("stream") else "application/json"
        return httpx2.Response(200, headers={"content-type": type_}, stream=stream)


class _StalledRaw:
    def __init__(self, head: bytes, where: str) -> None:
        self.head, self.where = head, where

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.head
        stop_here(self.where)

    def close(self) -> None:
        pass


class StallingConverse:
    """Answers boto3's ``converse_stream`` on ``client`` with each answer's events; answer
    number ``stall_at`` (from 0) sends its events up to the first piece of text, then
    blocks until the kill."""

    def __init__(
        self,
        client: Any,
        answers: list[list[tuple[str, dict[str, Any]]]],
        stall_at: int | None,
        where: str,
    ) -> None:
        self.answers, self.stall_at, self.where = list(answers), stall_at, where
        self.sent = 0
        client.meta.events.register("before-send.bedrock-runtime.ConverseStream", self._send)

    def _send(self, request: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        events = self.answers.pop(0)
        at, self.sent = self.sent, self.sent + 1
        if at == self.stall_at:  # up to the first piece of text
            first = next(i for i, (kind, _) in enumerate(events) if kind == "contentBlockDelta")
            events = events[: first + 1]
        data = b"".join(encode_event(kind, body) for kind, body in events)
        raw: Any = _StalledRaw(data, self.where) if at == self.stall_at else _Whole(data)
        headers = {"content-type": "application/vnd.amazon.eventstream"}
        return AWSResponse(request.url, 200, headers, raw)


class _Whole(_StalledRaw):
    def __init__(self, data: bytes) -> None:
        super().__init__(data, "")

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.head


BEDROCK_SPEC = {"id": "anthropic.claude-test-v1:0", "provider": "bedrock"}


def bedrock_model(boto: Any) -> LLMClient:
    return BedrockClient(fake_spec(**BEDROCK_SPEC, supports_prompt_caching=False), client=boto)


def sdk_model(
    provider: str,
    answers: list[Answer],
    *,
    stall_at: int | None = None,
    where: str = "",
    shown: Shown | None = None,
) -> LLMClient:
    """A real ``provider`` client (sync and async, over one offline server) answering
    ``answers`` in order; answer number ``stall_at`` stalls mid-stream (``stop_here(where)``,
    after ``shown`` counts its first text delta shown, when given; not for Bedrock)."""
    if provider == "bedrock":
        boto = dummy_bedrock_client()
        StallingConverse(boto, [bedrock_answer(a) for a in answers], stall_at, where)
        return bedrock_model(boto)
    if provider == "anthropic":
        replies = map(anthropic_answer, answers)
        server = StallingProvider(*replies, stall_at=stall_at, where=where, shown=shown)
        return AnthropicClient(
            "claude-sonnet-4-5",
            client=mock_anthropic_sdk(server),
            async_client=mock_async_anthropic_sdk(server),
        )
    replies = map(openai_answer, answers)
    server = StallingProvider(*replies, stall_at=stall_at, where=where, shown=shown)
    return OpenAIClient(
        "gpt-5-mini", client=mock_openai_sdk(server), async_client=mock_async_openai_sdk(server)
    )


# -- in the parent: PostgreSQL ------------------------------------------------------------------


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A conninfo whose ``search_path`` is a fresh schema on the server
    ``PARLOUR_TEST_POSTGRES`` names (dropped after); skips the test without one."""
    dsn = os.environ.get("PARLOUR_TEST_POSTGRES")
    if not dsn:
        pytest.skip("no PostgreSQL server: PARLOUR_TEST_POSTGRES is not set")
    psycopg = pytest.importorskip("psycopg")
    from psycopg.conninfo import make_conninfo

    schema = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")  # a fresh hex name
    try:
        yield make_conninfo(dsn, options=f"-c search_path={schema}")
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=["memory", "lmdb", "postgres"])
def each_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PersistentStore]:
    """Each store kind; PostgreSQL in a schema of its own (``postgres_schema``). A test
    module takes it under its own name: ``store = each_store``."""
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "lmdb":
        with LmdbStore(tmp_path / "db") as lmdb:
            yield lmdb
    else:
        with postgres_schema() as conninfo, PostgresStore(conninfo) as pg:
            yield pg
