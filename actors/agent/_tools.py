"""Functions as an agent's tools, and running the model's tool calls.

Every call becomes exactly one ``ToolResultBlock``, never an exception: a tool that raises
gives an error result carrying the exception's message, an unknown name and arguments that
do not fit the signature give error results too, and a call past its timeout gives an error
result while the turn goes on. Sync tools run on the process's tool workers
(``ProcessWorkers``: never a cap, so a tool that hangs holds its own thread and no other
call waits behind it); async tools run on the event loop (on the async path) or on a tool
worker's own loop (on the sync path), cancelled at their timeout either way. The calls of
one answer run concurrently, as a round (``ThreadRound``, ``LoopRound``) whose ``next``
hands out the results of the calls that finished since the last look, so that the turn
saves each result as it comes. A tool whose function takes a ``ToolContext`` gets the one
the driver made for its call (``_call_context``); a call given up at its timeout has its
context's ``cancelled`` set.

Beside its own functions an agent may take ``Toolset``s (an MCP server: ``agent/mcp``), whose
tools are listed when a turn begins and the set says its list changed (``ToolBox.refresh``,
``arefresh``); the box's ``tools`` then holds both, by name.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import msgspec

from parlour.runtime import FunctionTool, ToolContext, tool_from_function
from parlour.runtime.blocks import ToolResultBlock, ToolUseBlock
from parlour.runtime.providers import ProcessWorkers, Raised, called_on, caught

__all__ = [
    "Contexts",
    "Finished",
    "LoopRound",
    "ThreadRound",
    "ToolBox",
    "ToolFailed",
    "ToolRound",
    "Toolset",
]

tool_workers = ProcessWorkers("parlour-tool")  # every sync tool call; never a cap

Contexts = Sequence[ToolContext[Any] | None] | None  # one per call (None: no call takes one)
Finished = list[tuple[int, ToolResultBlock]]  # results, each with its call's place in the round


class ToolFailed(Exception):
    """Raised by a tool whose failure the model should read as it is (an MCP server's error
    result): the call's error result carries the message alone, not the exception's type."""


class Toolset(Protocol):
    """Tools an agent gets from elsewhere (an MCP server), listed when a turn begins.

    ``changed`` is True until the first listing and again whenever the source says its
    list changed (or its connection was lost); ``tools``/``atools`` list them (blocking
    the calling thread, or on the running loop); ``close``/``aclose`` let the source go.
    """

    @property
    def changed(self) -> bool: ...

    def tools(self) -> list[FunctionTool]: ...

    async def atools(self) -> list[FunctionTool]: ...

    def close(self) -> None: ...

    async def aclose(self) -> None: ...


class ToolBox:
    """An agent's tools by name: its own functions, and its toolsets' tools once listed.

    Args:
        tools: functions (sync or async, annotated; the docstring describes them) or ready
            ``FunctionTool``s. ``contextual`` names those that take a ``ToolContext``.
        rerun_on_recovery: names of tools safe to run again after a crash interrupted
            them; ``rerun`` names these and those declared so themselves. ``approval``
            names the tools declared ``needs_approval``.
        toolsets: sources of more tools, listed by ``refresh``/``arefresh``.

    Raises:
        ValueError: two tools share a name, or ``rerun_on_recovery`` names no tool (of the
            functions, when there are no toolsets).
        TypeError: a function takes ``*args`` or ``**kwargs``.

    Thread-safety: ``refresh`` may run from many threads and loops at once; a turn reads
    ``tools`` whole, the old dict or the new one.
    """

    def __init__(
        self,
        tools: Iterable[Callable[..., Any] | FunctionTool],
        rerun_on_recovery: Iterable[str] = (),
        toolsets: Iterable[Toolset] = (),
    ) -> None:
        self.tools: dict[str, FunctionTool] = {}
        for item in tools:
            tool = item if isinstance(item, FunctionTool) else tool_from_function(item)
            if tool.name in self.tools:
                raise ValueError(f"Two tools are named {tool.name}; tool names must be unique.")
            self.tools[tool.name] = tool
        self.toolsets = tuple(toolsets)
        self._own, self._named = dict(self.tools), frozenset(rerun_on_recovery)
        self._listed: dict[int, list[FunctionTool]] = {}  # by the toolset's place
        self._refused: set[int] = set()  # whose last listing clashed: listed again
        self._guard = threading.Lock()
        if not self.toolsets and (unknown := sorted(self._named - self.tools.keys())):
            raise ValueError(
                f"rerun_on_recovery names {', '.join(unknown)}, which no tool of the agent is."
            )
        self._index()

    def _index(self) -> None:
        self.contextual = frozenset(n for n, t in self.tools.items() if t.context_param)
        self.rerun = self._named | {n for n, t in self.tools.items() if t.rerun_on_recovery}
        self.approval = frozenset(n for n, t in self.tools.items() if t.needs_approval)

    @property
    def stale(self) -> bool:
        """True when a toolset's tools are to be listed (again) before the next turn."""
        toolsets = self.toolsets
        return bool(toolsets) and (
            bool(self._refused) or any(toolset.changed for toolset in toolsets)
        )

    def refresh(self) -> None:
        """List the tools of every toolset whose list changed, blocking this thread.

        Raises:
            ValueError: a listed tool has the name of another tool of the agent (the
                listing is refused, and asked for again at the next turn).
            Exception: what a toolset raises when it cannot list its tools.
        """
        for i, toolset in enumerate(self.toolsets):
            if toolset.changed or i in self._refused:
                self._merge(i, toolset.tools())

    async def arefresh(self) -> None:
        """``refresh`` on the running loop, the toolsets listed concurrently."""
        due = [(i, t) for i, t in enumerate(self.toolsets) if t.changed or i in self._refused]
        listed = await asyncio.gather(*(t.atools() for _, t in due), return_exceptions=True)
        for (i, _), tools in zip(due, listed, strict=True):
            if not isinstance(tools, BaseException):  # a failed one is listed next time
                self._merge(i, tools)
        if failed := [exc for exc in listed if isinstance(exc, BaseException)]:
            raise failed[0]

    def _merge(self, place: int, tools: list[FunctionTool]) -> None:
        with self._guard:
            merged = dict(self._own)
            for at, listed in {**self._listed, place: tools}.items():
                for tool in listed:
                    if tool.name in merged:
                        self._refused.add(place)  # the tools so far stay as they were
                        raise ValueError(
                            f"Two tools of the agent are named {tool.name} (one listed by "
                            f"{self.toolsets[at]!r}); give the toolset a prefix."
                        )
                    merged[tool.name] = tool
            self._listed[place] = tools
            self._refused.discard(place)
            self.tools = merged
            self._index()

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
    if isinstance(exc, ToolFailed):
        return _error(call, str(exc))
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


def _called(
    box: ToolBox, call: ToolUseBlock, context: ToolContext[Any] | None, timeout_s: float
) -> Any:
    """Run one call to completion in the current (worker) thread. An async tool runs on a
    loop of its own and is cancelled at its timeout, as on the async path (a sync one
    cannot be: its context's ``cancelled`` tells it)."""
    value = box.tools[call.name].call(call.input_json or "{}", context)
    if inspect.iscoroutine(value):
        return asyncio.run(asyncio.wait_for(value, timeout_s))
    return value


def _outcome(
    call: ToolUseBlock, value: object, timeout_s: float, context: ToolContext[Any] | None
) -> ToolResultBlock:
    """The result of a call that finished with ``value`` (``caught``'s), or of one
    given up at its timeout (``value`` is ``_GIVEN_UP``)."""
    if value is _GIVEN_UP:
        return _timed_out(call, timeout_s, context)
    if type(value) is Raised:
        return _failure(call, value.error)
    return _result(call, value)


_GIVEN_UP = object()


async def _one_async(
    box: ToolBox, call: ToolUseBlock, timeout_s: float, context: ToolContext[Any] | None
) -> ToolResultBlock:
    unknown = _unknown(box, call)
    if unknown is not None:
        return unknown
    try:
        started = _start(box, call, context, timeout_s)
        return _result(call, await asyncio.wait_for(started, timeout_s))
    except TimeoutError:
        return _timed_out(call, timeout_s, context)
    except Exception as exc:
        return _failure(call, exc)


async def _start(
    box: ToolBox, call: ToolUseBlock, context: ToolContext[Any] | None, timeout_s: float
) -> Any:
    if box.is_async(call.name):
        return await box.tools[call.name].call(call.input_json or "{}", context)
    job = functools.partial(_called, box, call, context, timeout_s)
    return await called_on(tool_workers, job)


# -- a round of calls, its results handed out as they finish --------------------------------------


class ToolRound:
    """The calls of one answer, running; ``done`` once every result was handed out."""

    pending: dict[Any, int]  # each running call's future or task, and its place
    ready: Finished  # results in, not handed out yet

    @property
    def done(self) -> bool:
        return not self.pending and not self.ready

    def cancel(self) -> None:
        """Stop waiting for the calls still running (their outcomes are discarded)."""
        for running in self.pending:
            running.cancel()
        self.pending.clear()


class ThreadRound(ToolRound):
    """A round on the sync path: each call on a tool worker, its outcome put in the round's
    queue. ``next`` blocks until a call finishes; at ``timeout_s`` after the start every
    call still running gets its timeout result at once (and is left to finish on its
    worker, its outcome discarded)."""

    def __init__(
        self, box: ToolBox, calls: Sequence[ToolUseBlock], timeout_s: float, contexts: Contexts
    ) -> None:
        self.calls, self.timeout_s, self.contexts = calls, timeout_s, contexts
        self.ready = []
        self.pending = {}  # each running call's place, by itself
        self.finished: queue.SimpleQueue[object] = queue.SimpleQueue()
        workers = tool_workers()
        for i, call in enumerate(calls):
            unknown = _unknown(box, call)
            if unknown is not None:
                self.ready.append((i, unknown))
                continue
            context = contexts[i] if contexts else None
            self.pending[i] = i
            job = functools.partial(_placed, i, box, call, context, timeout_s)
            workers.submit(job, self.finished)
        self.deadline = time.monotonic() + timeout_s

    def next(self) -> Finished:
        """The results of the calls finished since the last look (at least one)."""
        if self.pending:
            wait = 0.0 if self.ready else max(self.deadline - time.monotonic(), 0.0)
            outcomes: list[Any] = []
            try:
                outcomes.append(self.finished.get(timeout=wait))
                while True:
                    outcomes.append(self.finished.get_nowait())
            except queue.Empty:
                pass
            if not outcomes and not self.ready:  # past the deadline: all of them time out
                outcomes = [(i, _GIVEN_UP) for i in self.pending]
            for i, value in outcomes:
                if self.pending.pop(i, None) is not None:
                    context = self.contexts[i] if self.contexts else None
                    self.ready.append((i, _outcome(self.calls[i], value, self.timeout_s, context)))
        batch, self.ready = self.ready, []
        return batch

    def cancel(self) -> None:
        """Stop waiting for the calls still running (their outcomes are discarded)."""
        self.pending.clear()


def _placed(
    i: int, box: ToolBox, call: ToolUseBlock, context: ToolContext[Any] | None, timeout_s: float
) -> tuple[int, object]:
    return i, caught(functools.partial(_called, box, call, context, timeout_s))


class LoopRound(ToolRound):
    """A round on the async path: a task per call on the running loop (async tools on it,
    sync ones on the tool workers), each with its own timeout. ``on_cancel`` is called when
    the waiting task is cancelled, before the calls' tasks are (it tells their contexts)."""

    def __init__(
        self,
        box: ToolBox,
        calls: Sequence[ToolUseBlock],
        timeout_s: float,
        contexts: Contexts,
        on_cancel: Callable[[], None] = lambda: None,
    ) -> None:
        self.on_cancel = on_cancel
        loop = asyncio.get_running_loop()
        self.ready = []
        self.pending = {
            loop.create_task(_one_async(box, c, timeout_s, contexts[i] if contexts else None)): i
            for i, c in enumerate(calls)
        }

    async def next(self) -> Finished:
        """The results of the calls finished since the last look (at least one). Cancelling
        it cancels every call still running (sync ones finish on their workers)."""
        try:
            finished, _ = await asyncio.wait(self.pending, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            self.on_cancel()
            running = list(self.pending)
            self.cancel()
            await asyncio.wait(running)
            raise
        return [(self.pending.pop(task), task.result()) for task in finished]
