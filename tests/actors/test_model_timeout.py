"""A model call on ``send`` runs in the turn's own thread, so a provider that accepts the
request and then says nothing is bounded by the model timeout passed to the SDK as the
request's timeout: the turn fails with a retryable error after its retries, instead of
waiting out the SDK's ten-minute default."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from parlour.actors import Agent, ConversationService, RetryPolicy
from parlour.runtime import Depth, ModelSpec, OutputSize
from parlour.runtime.errors import RetryableLLMError
from parlour.runtime.providers import OpenAIClient

MODEL = ModelSpec.custom("stalling-model", context_window=8_192)


@pytest.fixture
def stalled_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[float]]]:
    """A loopback server that reads each request and never answers; it notes when each
    request came in."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    listener = socket.create_server(("127.0.0.1", 0))
    arrived: list[float] = []
    held: list[socket.socket] = []
    done = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.recv(65536)
            arrived.append(time.monotonic())
            held.append(conn)  # kept open, never answered

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1", arrived
    done.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def test_a_provider_that_never_answers_is_given_up_at_the_model_timeout_on_send(
    stalled_server: tuple[str, list[float]], service: ConversationService
) -> None:
    url, arrived = stalled_server
    agent = Agent(
        OpenAIClient(MODEL, base_url=url, max_retries=0),
        output=OutputSize.COMPACT,
        depth=Depth.IMMEDIATE,
        model_timeout_s=0.5,
        retry=RetryPolicy(attempts=1, base_s=0.01, max_s=0.01, budget_s=1.0),
    )
    chat = agent.chat(service, user_id="alice")
    began = time.monotonic()
    with pytest.raises(RetryableLLMError, match="could not be reached"):
        chat.send("Anyone there?")
    assert time.monotonic() - began < 30  # not the SDK's ten minutes
    assert len(arrived) == 2  # the call and its one retry, each given up after the timeout
    assert arrived[1] - arrived[0] >= 0.5
