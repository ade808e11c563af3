"""Functions as an agent's tools, and running the model's tool calls.

Every call becomes exactly one ``ToolResultBlock``, never an exception: a tool that raises
gives an error result carrying the exception's message, an unknown name and arguments that
do not fit the signature give error results too, and a call past its timeout gives an error
result while the turn goes on. Sync tools run in a bounded thread pool shared by the
process; async tools run on the event loop (on the async path) or on a pool thread's own
loop (on the sync path). The calls of one answer run concurrently. A tool whose function
takes a ``ToolContext`` gets the one the driver made for its call (``_call_context``); a
call given up at its timeout has its context's ``cancelled`` set.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import inspect
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

from parlour.runtime import FunctionTool, ToolContext, tool_from_function
from parlour.runtime.blocks import ToolResultBlock, ToolUseBlock

__all__ = ["Contexts", "ToolBox", "run_calls", "run_calls_async"]

Contexts = Sequence[ToolContext[Any] | None] | None  # one per call (None: no call takes one)

TOOL_WORKERS = 32
_pool: cf.ThreadPoolExecutor | None = None
_guard = threading.Lock()


def tool_pool() -> cf.ThreadPoolExecutor:
    """The process's pool for sync tool calls (created on first use)."""
    global _pool
    with _guard:
        if _pool is None:
            _pool = prestarted_pool(TOOL_WORKERS, "parlour-tool")
        return _pool


def prestarted_pool(workers: int, name: str) -> cf.ThreadPoolExecutor:
    """A pool whose threads all run already. A pool that starts a thread per submit makes
    the submitter wait for the new thread to get the GIL, which under load (many busy
    threads) blocks an event loop for tens of milliseconds."""
    pool = cf.ThreadPoolExecutor(workers, thread_name_prefix=name)
    gate = threading.Barrier(workers + 1)
    for _ in range(workers):
        pool.submit(gate.wait)
    gate.wait()
    return pool


class ToolBox:
    """An agent's tools by name.

    Args:
        tools: functions (sync or async, annotated; the docstring describes them) or ready
            ``FunctionTool``s. ``contextual`` names those that take a ``ToolContext``.

    Raises:
        ValueError: two tools share a name.
        TypeError: a function takes ``*args`` or ``**kwargs``.
    """

    def __init__(self, tools: Iterable[Callable[..., Any] | FunctionTool]) -> None:
        self.tools: dict[str, FunctionTool] = {}
        for item in tools:
            tool = item if isinstance(item, FunctionTool) else tool_from_function(item)
            if tool.name in self.tools:
                raise ValueError(f"Two tools are named {tool.name}; tool names must be unique.")
            self.tools[tool.name] = tool
        self.contextual = frozenset(n for n, t in self.tools.items() if t.context_param)

    def declarations(self) -> list[FunctionTool]:
        return list(self.tools.values())

    def is_async(self, name: str) -> bool:
        tool = self.tools.get(name)
        return tool is not None and inspect.iscoroutinefunction(tool.fn)


def _error(call: ToolUseBlock, text: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=call.id, content=text, is_error=True)


def _result(call: ToolUseBlock, value: Any) -> ToolResultBlock:
    content = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    return ToolResultBlock(tool_use_id=call.id, content=content)


def _failure(call: ToolUseBlock, exc: BaseException) -> ToolResultBlock:
    if isinstance(exc, msgspec.ValidationError | msgspec.DecodeError):
        return _error(call, f"The arguments of {call.name} do not fit its parameters: {exc}")
    return _error(call, f"{call.name} failed: {type(exc).__name__}: {exc}")


def _timed_out(
    call: ToolUseBlock, timeout_s: float, context: ToolContext[Any] | None
) -> ToolResultBlock:
    text = f"{call.name} did not finish within its timeout of {timeout_s:g}s."
    if context is not None:  # the call goes on in its thread: tell it it was given up
        context.cancelled.set(text)
    return _error(call, text)


def _unknown(box: ToolBox, call: ToolUseBlock) -> ToolResultBlock | None:
    if call.name in box.tools:
        return None
    known = ", ".join(sorted(box.tools)) or "none"
    return _error(call, f"There is no tool named {call.name} (the tools are: {known}).")


def _call_in_thread(box: ToolBox, call: ToolUseBlock, context: ToolContext[Any] | None) -> Any:
    """Run one call to completion in the current (pool) thread."""
    value = box.tools[call.name].call(call.input_json or "{}", context)
    if inspect.iscoroutine(value):
        return asyncio.run(value)
    return value


def run_calls(
    box: ToolBox, calls: Sequence[ToolUseBlock], timeout_s: float, contexts: Contexts = None
) -> list[ToolResultBlock]:
    """Run every call concurrently in the tool pool; the results in the calls' order.

    Blocks the calling thread for at most ``timeout_s`` (a call still running then gets a
    timeout result and is left to finish in its pool thread, its outcome discarded).
    """
    results: list[ToolResultBlock | None] = [_unknown(box, c) for c in calls]
    futures = {
        i: tool_pool().submit(_call_in_thread, box, c, contexts[i] if contexts else None)
        for i, c in enumerate(calls)
        if results[i] is None
    }
    cf.wait(futures.values(), timeout=timeout_s)
    for i, future in futures.items():
        results[i] = _outcome(calls[i], future, timeout_s, contexts[i] if contexts else None)
    return [r for r in results if r is not None]


def _outcome(
    call: ToolUseBlock,
    future: cf.Future[Any],
    timeout_s: float,
    context: ToolContext[Any] | None,
) -> ToolResultBlock:
    if not future.done():
        future.cancel()
        return _timed_out(call, timeout_s, context)
    exc = future.exception()
    return _result(call, future.result()) if exc is None else _failure(call, exc)


async def run_calls_async(
    box: ToolBox, calls: Sequence[ToolUseBlock], timeout_s: float, contexts: Contexts = None
) -> list[ToolResultBlock]:
    """Run every call concurrently: async tools on this loop, sync ones in the tool pool.

    Never blocks the loop. Cancelling it cancels the async calls (sync ones finish in their
    pool threads, their outcomes discarded).
    """
    return list(
        await asyncio.gather(
            *(
                _one_async(box, c, timeout_s, contexts[i] if contexts else None)
                for i, c in enumerate(calls)
            )
        )
    )


async def _one_async(
    box: ToolBox, call: ToolUseBlock, timeout_s: float, context: ToolContext[Any] | None
) -> ToolResultBlock:
    unknown = _unknown(box, call)
    if unknown is not None:
        return unknown
    try:
        return _result(call, await asyncio.wait_for(_start(box, call, context), timeout_s))
    except TimeoutError:
        return _timed_out(call, timeout_s, context)
    except Exception as exc:
        return _failure(call, exc)


async def _start(box: ToolBox, call: ToolUseBlock, context: ToolContext[Any] | None) -> Any:
    if box.is_async(call.name):
        return await box.tools[call.name].call(call.input_json or "{}", context)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(tool_pool(), _call_in_thread, box, call, context)
