"""A client over a blocking SDK (boto3's, for Bedrock) awaited on a loop: every call is in
flight at once, however many, and what one raises reaches its awaiter."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from parlour.runtime import ConversationContext, ScriptedClient
from parlour.runtime.errors import RetryableLLMError
from parlour.runtime.providers import LLMClient, WireRequest


class BlockingSdk(ScriptedClient):
    """The scripted answers, each sent by a blocking call (``_send``, as boto3's) through
    the template's default ``_asend``; a call waits until ``together`` calls are in flight,
    and a conversation titled ``fail`` raises instead."""

    def __init__(self, together: int) -> None:
        super().__init__()
        self.barrier = threading.Barrier(together)

    def _send(self, request: WireRequest) -> Any:
        self.barrier.wait(timeout=30)
        if request.conversation_id == "fail":
            raise RetryableLLMError("throttled")
        return super()._send(request)

    async def _asend(self, request: WireRequest, on_text: Any) -> Any:
        return await LLMClient._asend(self, request, on_text)


def _conversation(cid: str) -> ConversationContext:
    context = ConversationContext(cid, user_id="u")
    context.add_user_message(f"Hello from {cid}.")
    return context


def test_a_hundred_blocking_calls_from_one_loop_are_all_in_flight_at_once() -> None:
    calls = 100  # the loop's default executor would run min(32, CPUs + 4) at once
    client = BlockingSdk(together=calls)

    async def main() -> list[str]:
        answers = await asyncio.gather(
            *(client.arespond(_conversation(f"c{i}")) for i in range(calls))
        )
        return [answer.text for answer in answers]

    texts = asyncio.run(main())
    assert texts == [f"Answer 1: you said 'Hello from c{i}.'." for i in range(calls)]


def test_what_a_blocking_call_raises_reaches_the_task_that_awaits_it() -> None:
    client = BlockingSdk(together=2)

    async def main() -> str:
        ok = asyncio.ensure_future(client.arespond(_conversation("ok")))
        with pytest.raises(RetryableLLMError, match="throttled"):
            await client.arespond(_conversation("fail"))
        return (await ok).text

    assert asyncio.run(main()) == "Answer 1: you said 'Hello from ok.'."
