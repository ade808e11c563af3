"""A turn's rounds of tool calls, and a resumed turn's recovery (steps of ``_turn``'s
generator: they yield effects and events, and do no I/O of their own).

A round's calls run concurrently; as calls finish, their results go into the
conversation and are saved (waited) before the turn goes on, so a crash keeps every
finished result: the first result to finish adds the round's results message (one, its
results in call order, as a round that never crashed always had), each later one joins
it in its call's place (a change in place of the message). A resumed turn whose last
message answers calls with the interrupted result a restore gave them runs again those of
tools declared safe to run again, each real result replacing its interrupted one in
place, saved as it comes, and reports what it did (``Recovered``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from operator import itemgetter
from typing import Any

from parlour.runtime import (
    ConversationContext,
    IncomingMessage,
    Message,
    OutgoingMessage,
    ResponseHandler,
    is_interrupted_result,
)
from parlour.runtime.blocks import ContentBlock, TextBlock, ToolResultBlock, ToolUseBlock

from ._effects import NextResults, RunTools
from ._events import Recovered, Reply, ToolCallFinished, ToolCallStarted
from ._plan import Steps, TurnPlan
from ._record import mark_round
from ._tools import Finished, ToolRound

__all__ = ["add", "add_offers", "recover", "run_tools", "user_message"]


def add(context: ConversationContext, plan: TurnPlan, message: Message) -> None:
    """Add ``message`` to the conversation and to the turn's messages."""
    context.add_message(message)
    plan.added.append(message)


def check_said(text: str, attachments: Sequence[ContentBlock] = ()) -> None:
    """Refuse a message that says nothing: blank text (empty or only whitespace) and no
    attachment. The providers drop blank text, so such a message would leave the request
    ending in the model's own last answer, which Anthropic reads as the start of its
    next one (and refuses with thinking on).

    Raises:
        ValueError: nothing is said; nothing was added or saved.
    """
    if not attachments and (not text or text.isspace()):
        raise ValueError("A message needs text that is not blank, or an attachment.")


def user_message(
    text: str, attachments: Sequence[ContentBlock], handler: ResponseHandler | None
) -> OutgoingMessage:
    blocks: list[ContentBlock] = [TextBlock(text=text), *attachments]
    return OutgoingMessage(text, blocks, response_handler=handler, compactable=False)


def add_offers(context: ConversationContext, plan: TurnPlan, offers: Iterable[str]) -> None:
    """Add ``offers`` (messages offered to the turn) as the user's messages, in order."""
    for text in offers:
        add(context, plan, user_message(text, (), plan.handler))


def run_tools(
    context: ConversationContext,
    plan: TurnPlan,
    calls: list[ToolUseBlock],
    into: OutgoingMessage | None = None,
) -> Steps:
    """Run the round's calls; the first result to finish adds the results message (one for
    the round, compactable; ``into``: the results join that message, after what it holds),
    each later one joins it in its call's place, and each is saved (waited) as it comes, so
    a crash keeps every finished result."""
    message = into
    base = 0 if into is None else len(into.blocks)

    def place(results: list[ToolResultBlock | None], finished: Finished) -> None:
        nonlocal message
        if message is None:
            message = OutgoingMessage(
                blocks=[r for r in results if r is not None], compactable=True
            )
            add(context, plan, message)
            return
        for i, result in sorted(finished, key=_PLACE):
            message.blocks.insert(base + sum(r is not None for r in results[:i]), result)

    yield from _round(context, plan, calls, place)
    return Reply(text="", usage=plan.usage, messages=[])


_PLACE = itemgetter(0)


def _round(
    context: ConversationContext,
    plan: TurnPlan,
    calls: Sequence[ToolUseBlock],
    place: Callable[[list[ToolResultBlock | None], Finished], None],
) -> Steps:
    """Run ``calls`` as one round: as calls finish, ``place`` puts their results in the
    conversation (given every result so far, by call, and the new ones) and the turn saves;
    then every call's ``ToolCallFinished``, in call order."""
    for call in calls:
        yield ToolCallStarted(call_id=call.id, name=call.name, arguments=call.input_json)
    round_: ToolRound
    round_, finished = yield RunTools(calls)
    results: list[ToolResultBlock | None] = [None] * len(calls)
    try:
        while True:
            for i, result in finished:
                results[i] = result
            place(results, finished)
            mark_round(context, plan)
            yield plan.saving(context)  # waited: a finished call outlives a crash
            if round_.done:
                break
            finished = yield NextResults(round_)
    finally:
        round_.cancel()  # a turn ended abnormally stops waiting for the calls left
    for call, r in zip(calls, results, strict=True):
        assert r is not None  # every call of a done round has its result
        yield ToolCallFinished(
            call_id=call.id, name=call.name, content=r.content, is_error=r.is_error
        )
    return Reply(text="", usage=plan.usage, messages=[])


# -- a resumed turn's recovery ------------------------------------------------------------------


def recover(
    context: ConversationContext, plan: TurnPlan, always: bool = False
) -> Generator[Any, Any, Recovered | None]:
    """On a turn that picks up an interrupted one whose last round holds interrupted
    results: run again the calls of tools safe to run again, each real result replacing
    its interrupted one (saved as each comes), and report what was done; when nothing was
    interrupted, None, or with ``always`` (the open-turn record said a turn was cut short)
    an empty ``Recovered``."""
    found = _interrupted(context)
    if not found:
        if not always:
            return None
        empty = Recovered(rerun=[], interrupted=[])
        yield empty
        return empty
    message, places = found
    rerun = [call for call in places if call.name in plan.tools.rerun]
    recovered = Recovered(
        rerun=[c.id for c in rerun], interrupted=[c.id for c in places if c not in rerun]
    )
    yield recovered
    if rerun:

        def place(results: list[ToolResultBlock | None], finished: Finished) -> None:
            for i, result in finished:
                message.blocks[places[rerun[i]]] = result

        yield from _round(context, plan, rerun, place)
    return recovered


def _interrupted(
    context: ConversationContext,
) -> tuple[Message, dict[ToolUseBlock, int]] | None:
    """The last message, when it answers the calls of the one before with interrupted
    results, and each such call with its result's place in it; else None."""
    messages = context.messages
    if len(messages) < 2 or not isinstance(messages[-2], IncomingMessage):
        return None
    message = messages[-1]
    calls = {b.id: b for b in messages[-2].blocks if isinstance(b, ToolUseBlock)}
    places = {}
    for at, block in enumerate(message.blocks):
        call = calls.get(block.tool_use_id) if isinstance(block, ToolResultBlock) else None
        if call is not None and is_interrupted_result(block, call.name):
            places[call] = at
    return (message, places) if places else None
