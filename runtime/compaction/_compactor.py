"""Compactors: the ``ContextCompactor`` seam the window manager climbs the ladder through,
and ``LLMContextCompactor``, which has a model write every summary.

A compaction is all or nothing: its plan runs to the end before the conversation's message
list is replaced (in place), so below ``MAXIMUM`` a failing or blank summary leaves every
message exactly as it was, the failure is logged, and the result says so. At ``MAXIMUM``
the failure is raised as the very exception the summarizer raised. Interrupts
(``KeyboardInterrupt``, ``asyncio.CancelledError``) are never swallowed at any level.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, runtime_checkable

from loguru import logger

from .._context import ConversationContext
from .._messages import Message
from .._roles import Grade
from ..errors import IllegalStateError, UncorrectableLLMError
from ..models._catalog import ModelCatalog
from ..models._spec import ModelSpec
from ..providers._response import LLMResponse
from ..providers._template import LLMClient
from ._levels import CompactionLevel, CompactionResult, SummaryCall
from ._plans import Plan, plan_for
from ._prompts import SummaryRequest

__all__ = [
    "AsyncContextCompactor",
    "ContextCompactor",
    "LLMContextCompactor",
    "summary_model",
]

Reply = str | LLMResponse | None
Complete = Callable[[str], Reply]
AsyncComplete = Callable[[str], Awaitable[Reply]]
DEFAULT_MIN_RESULT_CHARS = 600  # a shorter tool result costs more to summarize than it frees
DEFAULT_SUMMARY_TOKENS = 2_000  # the output backstop of one summary call


@runtime_checkable
class ContextCompactor(Protocol):
    """Compacts a conversation's messages in place at one level.

    Contract: never touches the objective, the declared tools or the artifact registry;
    keeps non-compactable messages as the same instances; never separates a tool call from
    its result; below ``MAXIMUM`` a failure leaves the messages as they were (and is reported
    in ``CompactionResult.error``), at ``MAXIMUM`` it is raised.
    """

    def compact(
        self, conversation: ConversationContext, level: CompactionLevel
    ) -> CompactionResult: ...


@runtime_checkable
class AsyncContextCompactor(ContextCompactor, Protocol):
    """A compactor whose summaries can be awaited (made concurrently within a level)."""

    async def acompact(
        self, conversation: ConversationContext, level: CompactionLevel
    ) -> CompactionResult: ...


def summary_model(spec: ModelSpec, catalog: ModelCatalog | None = None) -> ModelSpec:
    """The model that writes summaries for a conversation served by ``spec``: the catalog's
    smallest grade from the same provider, else ``spec`` itself when the catalog has no
    graded model from that provider. Thread-safe (reads only)."""
    try:
        return (catalog or ModelCatalog.default()).for_grade(Grade.SMALL, [spec.provider])
    except UncorrectableLLMError:
        return spec


class LLMContextCompactor:
    """Has a model write every summary, through ``complete(prompt)`` (or ``acomplete``).

    Args:
        complete: the summary call, a prompt in and the summary out: a text, or an
            ``LLMResponse`` whose usage is then reported with the compaction.
        acomplete: the same as a coroutine function; ``acompact`` gathers the summaries of
            one level concurrently through it.
        min_result_chars: a tool result shorter than this is never summarized.
        model_id: the id reported for calls that return text only.

    Raises:
        ValueError: neither ``complete`` nor ``acomplete`` is given.

    Thread-safety: holds no per-compaction state, so one instance serves any number of
    conversations at once (each compaction runs on its conversation's owner's thread).
    """

    def __init__(
        self,
        complete: Complete | None = None,
        *,
        acomplete: AsyncComplete | None = None,
        min_result_chars: int = DEFAULT_MIN_RESULT_CHARS,
        model_id: str | None = None,
    ) -> None:
        if complete is None and acomplete is None and type(self) is LLMContextCompactor:
            raise ValueError("LLMContextCompactor needs a complete or an acomplete callable.")
        self._complete = complete
        self._acomplete = acomplete
        self.min_result_chars = min_result_chars
        self.model_id = model_id

    @classmethod
    def for_client(
        cls,
        client: LLMClient,
        spec: ModelSpec | None = None,
        *,
        catalog: ModelCatalog | None = None,
        summary_tokens: int = DEFAULT_SUMMARY_TOKENS,
    ) -> LLMContextCompactor:
        """A compactor whose summaries are one-turn calls through ``client``, on ``spec`` or
        by default on ``summary_model(client.spec, catalog)``; each call's usage is reported."""
        model = spec or summary_model(client.spec, catalog)

        def complete(prompt: str) -> LLMResponse:
            return client.respond(ConversationContext.single_turn(model, prompt, summary_tokens))

        return cls(complete, model_id=model.id)

    @property
    def can_await(self) -> bool:
        """Whether ``acompact`` may be used (an async summarizer was given)."""
        return self._ready(asynchronous=True)

    # -- compacting -----------------------------------------------------------------------------

    def compact(
        self, conversation: ConversationContext, level: CompactionLevel
    ) -> CompactionResult:
        """Compact ``conversation`` at ``level``, one summary call after another.

        Raises:
            IllegalStateError: this compactor was built with ``acomplete`` only.
            Exception: at ``MAXIMUM``, whatever the summary call raised, as the same object;
                ``UncorrectableLLMError`` for a blank or missing summary.
        """
        if not self._ready(asynchronous=False):
            raise IllegalStateError("This compactor has only an async summarizer: use acompact.")
        if not conversation.is_compactable():
            return _untouched(conversation, level)
        calls: list[SummaryCall] = []
        before = list(conversation.messages)
        try:
            after = _drive(self._plan(conversation, level), lambda r: self._answer(r, calls))
        except Exception as exc:
            return self._failed(conversation, level, exc, calls)
        return _apply(conversation, level, before, after, calls)

    async def acompact(
        self, conversation: ConversationContext, level: CompactionLevel
    ) -> CompactionResult:
        """Like ``compact``, the summaries of one level made concurrently. Never blocks the
        event loop when built with ``acomplete``.

        Raises:
            IllegalStateError: this compactor was built with ``complete`` only.
            Exception: at ``MAXIMUM``, as ``compact``.
        """
        if not self._ready(asynchronous=True):
            raise IllegalStateError("This compactor has only a sync summarizer: use compact.")
        if not conversation.is_compactable():
            return _untouched(conversation, level)
        calls: list[SummaryCall] = []
        before = list(conversation.messages)
        try:
            plan = self._plan(conversation, level)
            after = await _adrive(plan, lambda r: self._aanswer(r, calls))
        except Exception as exc:
            return self._failed(conversation, level, exc, calls)
        return _apply(conversation, level, before, after, calls)

    # -- the summary call (the offline compactor overrides these) ----------------------------------

    def _ready(self, *, asynchronous: bool) -> bool:
        return (self._acomplete if asynchronous else self._complete) is not None

    def _reply(self, request: SummaryRequest) -> Reply:
        assert self._complete is not None  # checked by _ready before any plan runs
        return self._complete(request.prompt)

    async def _areply(self, request: SummaryRequest) -> Reply:
        assert self._acomplete is not None
        return await self._acomplete(request.prompt)

    def _answer(self, request: SummaryRequest, calls: list[SummaryCall]) -> str:
        return self._accept(request, self._reply(request), calls)

    async def _aanswer(self, request: SummaryRequest, calls: list[SummaryCall]) -> str:
        return self._accept(request, await self._areply(request), calls)

    def _accept(self, request: SummaryRequest, reply: Reply, calls: list[SummaryCall]) -> str:
        """The summary text of ``reply``, its call recorded.

        Raises:
            UncorrectableLLMError: the summary is blank or missing.
        """
        if isinstance(reply, LLMResponse):
            calls.append(SummaryCall(model_id=reply.model_id, usage=reply.usage))
            text = reply.text
        else:
            calls.append(SummaryCall(model_id=self.model_id))
            text = reply or ""
        if not text.strip():
            raise UncorrectableLLMError(
                f"The summary model returned a blank summary for a {request.level.value} "
                "compaction; a blank summary never replaces content."
            )
        return text.strip()

    def _plan(self, conversation: ConversationContext, level: CompactionLevel) -> Plan:
        return plan_for(level, list(conversation.messages), self.min_result_chars)

    def _failed(
        self,
        conversation: ConversationContext,
        level: CompactionLevel,
        exc: Exception,
        calls: list[SummaryCall],
    ) -> CompactionResult:
        """Below MAXIMUM: logged and reported, messages untouched. At MAXIMUM: raised."""
        if level is CompactionLevel.MAXIMUM:
            raise exc
        logger.bind(conversation_id=conversation.conversation_id).warning(
            "Compaction at {} failed ({}: {}); the messages are kept as they were",
            level.value,
            type(exc).__name__,
            exc,
        )
        count = len(conversation.messages)
        return CompactionResult(
            level=level,
            messages_before=count,
            messages_after=count,
            calls=tuple(calls),
            error=f"{type(exc).__name__}: {exc}",
        )


def _drive(plan: Plan, answer: Callable[[SummaryRequest], str]) -> list[Message]:
    """Run ``plan``, answering each batch one request after another."""
    answers: list[str] | None = None
    while True:
        try:
            batch = plan.send(answers)  # type: ignore[arg-type]  # None starts the generator
        except StopIteration as done:
            return list(done.value)
        answers = [answer(request) for request in batch]


async def _adrive(plan: Plan, answer: Callable[[SummaryRequest], Awaitable[str]]) -> list[Message]:
    """Run ``plan``, answering each batch concurrently."""
    answers: list[str] | None = None
    while True:
        try:
            batch = plan.send(answers)  # type: ignore[arg-type]
        except StopIteration as done:
            return list(done.value)
        answers = list(await asyncio.gather(*(answer(request) for request in batch)))


def _untouched(conversation: ConversationContext, level: CompactionLevel) -> CompactionResult:
    """A conversation marked non-compactable is never compacted."""
    count = len(conversation.messages)
    return CompactionResult(level=level, messages_before=count, messages_after=count)


def _apply(
    conversation: ConversationContext,
    level: CompactionLevel,
    before: Sequence[Message],
    after: list[Message],
    calls: list[SummaryCall],
) -> CompactionResult:
    """Replace the messages in place (one step, after every summary came back)."""
    survivors = {id(m) for m in after}
    replaced = sum(1 for m in before if id(m) not in survivors)
    if replaced:
        conversation.messages[:] = after
    return CompactionResult(
        level=level,
        messages_before=len(before),
        messages_after=len(conversation.messages),
        replaced=replaced,
        calls=tuple(calls),
    )
