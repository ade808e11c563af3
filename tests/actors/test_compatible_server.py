"""A local OpenAI-compatible server (vLLM, Ollama, llama.cpp) reached through ``base_url``
with no key set: an agent runs a tool-using chat against a tiny one on loopback, from a
thread and from asyncio, with a model declared outside the catalog."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from parlour.actors import Agent, ConversationService
from parlour.runtime import ConversationContext, Depth, ModelSpec, OutputSize
from parlour.runtime.providers import OpenAIClient, client_for
from parlour.runtime.testing import openai_completion, openai_sse
from tests.runtime.providers._sent_bodies import check_request

MODEL = ModelSpec.custom("llama3.1:8b", context_window=8_192)


class Compatible:
    """What a compatible server does with a chat: it calls ``lookup`` once for a question
    when tools are declared, then answers with the tool's result; it records every request
    (path, Authorization header, body)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str | None, dict[str, Any]]] = []

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return openai_completion(f"The order: {last['content']}", model=MODEL.id)
        if body.get("tools"):
            call = {"id": "call_0", "name": "lookup", "arguments": '{"order_id": "42"}'}
            return openai_completion(None, tool_calls=[call], finish_reason="tool_calls")
        return openai_completion("Hello from the local model.", model=MODEL.id)


@pytest.fixture
def local_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Compatible]]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    fake = Compatible()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.requests.append((self.path, self.headers.get("Authorization"), body))
            reply = fake.answer(body)
            if body.get("stream"):
                payload, kind = openai_sse(reply), "text/event-stream"
            else:
                payload, kind = json.dumps(reply).encode(), "application/json"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1", fake
    server.shutdown()
    server.server_close()
    thread.join()


def lookup(order_id: str) -> str:
    """The status of an order.

    Args:
        order_id: The order's number.
    """
    return f"order {order_id} shipped"


def test_an_agent_chats_with_a_local_server_through_base_url_with_no_key(
    local_server: tuple[str, Compatible], service: ConversationService
) -> None:
    url, fake = local_server
    agent = Agent(
        client_for(MODEL, base_url=url),
        tools=[lookup],
        objective="You answer order questions.",
        output=OutputSize.COMPACT,
        depth=Depth.IMMEDIATE,
    )
    chat = agent.chat(service, user_id="alice")
    assert chat.send("Where is order 42?").text == "The order: order 42 shipped"
    reply = asyncio.run(chat.asend("And again?"))
    assert reply.text == "The order: order 42 shipped"
    assert len(fake.requests) == 4
    for path, _, body in fake.requests:
        assert path == "/v1/chat/completions" and body["model"] == "llama3.1:8b"
        check_request(path, body)
        assert "reasoning_effort" not in body  # a custom model is asked for no reasoning
        assert body["max_completion_tokens"] <= MODEL.max_output_tokens


def test_openai_base_url_in_the_environment_is_enough(
    local_server: tuple[str, Compatible], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, fake = local_server
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    client = client_for(MODEL)
    assert isinstance(client, OpenAIClient) and client.base_url == url
    c = ConversationContext("env-1")
    c.depth, c.output_declaration = Depth.IMMEDIATE, OutputSize.VERDICT
    c.add_user_message("Hi")
    assert client.respond(c).text == "Hello from the local model."
    assert fake.requests[-1][1] == f"Bearer {OpenAIClient.KEYLESS_PLACEHOLDER}"


def test_a_key_given_is_sent_to_the_local_server(local_server: tuple[str, Compatible]) -> None:
    url, fake = local_server
    client = OpenAIClient(MODEL, base_url=url, api_key="sk-local")
    c = ConversationContext("key-1")
    c.depth, c.output_declaration = Depth.IMMEDIATE, OutputSize.VERDICT
    c.add_user_message("Hi")
    client.respond(c)
    assert fake.requests[-1][1] == "Bearer sk-local"
