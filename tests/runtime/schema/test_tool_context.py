"""A function tool's ``ToolContext`` parameter: left out of the schema, passed by the host;
and the ``Cancellation`` a call watches, from threads and from loops."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Annotated, Any, Optional

import pytest
from loguru import logger

from parlour.runtime import Cancellation, LLMDescription, ToolContext, tool_from_function


def context(call_id: str = "call_1") -> ToolContext[str]:
    return ToolContext(
        user_id="alice",
        conversation_id="conv",
        turn_id="turn-1",
        call_id=call_id,
        idempotency_key="key",
        deps="the deps",
        logger=logger,
        cancelled=Cancellation(),
    )


def plain(city: str, ctx: ToolContext) -> str:  # type: ignore[type-arg]
    """Plain."""
    return f"{city} {ctx.deps}"


def generic(ctx: ToolContext[str], city: str) -> str:
    """Generic, first."""
    return f"{city} {ctx.deps}"


def optional(city: str, ctx: ToolContext[str] | None = None) -> str:
    """Optional, defaulted."""
    return f"{city} {ctx.deps if ctx else 'none'}"


def old_optional(city: str, ctx: Optional[ToolContext[str]] = None) -> str:  # noqa: UP045
    """Optional, spelled the old way."""
    return f"{city} {ctx.deps if ctx else 'none'}"


def annotated(city: str, ctx: Annotated[ToolContext[str], LLMDescription("no")]) -> str:
    """Annotated."""
    return f"{city} {ctx.deps}"


@pytest.mark.parametrize("fn", [plain, generic, optional, old_optional, annotated])
def test_a_tool_context_parameter_is_left_out_of_the_schema_and_passed_by_the_host(
    fn: Any,
) -> None:
    tool = tool_from_function(fn)
    schema = json.loads(tool.definition().schema_json or "{}")
    assert schema["properties"].keys() == {"city"} and schema["required"] == ["city"]
    assert tool.context_param == "ctx"
    assert tool.call('{"city": "Rome"}', context()) == "Rome the deps"


def test_a_tool_without_a_context_given_none_uses_its_default_or_refuses() -> None:
    assert tool_from_function(optional).call('{"city": "Rome"}') == "Rome none"
    with pytest.raises(TypeError, match="ctx"):
        tool_from_function(plain).call('{"city": "Rome"}')
    assert tool_from_function(lambda city: city, name="echo").context_param is None


def test_a_tool_taking_two_contexts_is_refused() -> None:
    def twice(a: ToolContext[str], b: ToolContext[str]) -> str:
        """Twice."""
        return ""

    with pytest.raises(TypeError, match="two ToolContext"):
        tool_from_function(twice)


def test_a_cancellation_wakes_a_thread_and_a_loop_and_keeps_its_first_reason() -> None:
    cancellation = Cancellation()
    assert not cancellation.is_set() and cancellation.reason is None
    assert cancellation.wait(0.001) is False
    in_thread: list[bool] = []
    waiting = threading.Thread(target=lambda: in_thread.append(cancellation.wait(10)))
    waiting.start()

    async def main() -> str | None:
        waiter = asyncio.ensure_future(cancellation.wait_async())
        await asyncio.sleep(0)  # the waiter is registered before the set
        setter = threading.Thread(target=cancellation.set, args=("the turn was cancelled",))
        setter.start()
        await asyncio.wait_for(waiter, 10)
        setter.join()
        await cancellation.wait_async()  # set already: returns at once
        return cancellation.reason

    assert asyncio.run(main()) == "the turn was cancelled"
    waiting.join(10)
    cancellation.set("a later reason")
    assert in_thread == [True] and cancellation.reason == "the turn was cancelled"
    assert context().is_cancelled() is False
