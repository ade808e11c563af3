"""Tool calls and their results, kept in pairs: what a restore repairs and a render refuses.

Every provider refuses a request that holds a tool call without its result, or a result
without its call (Anthropic and OpenAI answer 400). A process that dies while a tool runs
stores the model's call and never its result; every later turn would then fail. So:

- a restore answers each dangling call (``dangling_calls``: a call no later result
  answers) with ``interrupted_result``: an error result saying the call was interrupted
  and its outcome is unknown (``answer_dangling``, on the stored messages);
- a render refuses, before anything is sent, a request whose pairing a provider would
  refuse (``check_pairing``, raising ``UnpairedToolCallError``); a client checks through
  ``check_rendered``, which walks only the turns of messages an earlier check of the
  conversation's render record verified.

Both look at each block's class once at C speed and do Python work only per tool block, so
a conversation without tool traffic costs a C-level scan and nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain, compress, repeat
from operator import attrgetter
from typing import Any, Protocol, TypeVar, cast

import msgspec

from ._prepared import Turn
from ._roles import TurnRole
from ._settled import Settled
from .blocks import ContentBlock, ToolResultBlock, ToolUseBlock
from .errors import UnpairedToolCallError

__all__ = [
    "INTERRUPTED_RESULT",
    "DanglingCall",
    "HasBlocks",
    "answer_dangling",
    "check_pairing",
    "check_rendered",
    "dangling_calls",
    "interrupted_result",
    "is_interrupted_result",
]

INTERRUPTED_RESULT = (
    "The call to {name} was interrupted before it returned a result, so its outcome is unknown."
)

_BLOCKS = attrgetter("blocks")
_TOOLS = frozenset({ToolUseBlock, ToolResultBlock})
_FEW = 4  # up to this many turns, a plain loop finds tool blocks faster than C iterators


class HasBlocks(Protocol):
    """A message in any form: live (``Message``) or stored (``MessageSnapshot``)."""

    @property
    def blocks(self) -> Sequence[ContentBlock]: ...


class _Stored(HasBlocks, Protocol):
    @property
    def role(self) -> str: ...


_S = TypeVar("_S", bound=_Stored)


class DanglingCall(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call that no later result answers.

    ``message`` is the index, in the list searched, of the message holding the call.
    """

    message: int
    call: ToolUseBlock

    @property
    def id(self) -> str:
        return self.call.id

    @property
    def name(self) -> str:
        """The tool called."""
        return self.call.name

    @property
    def arguments(self) -> str:
        """The call's arguments, as the JSON text the model sent."""
        return self.call.input_json


def interrupted_result(call: ToolUseBlock) -> ToolResultBlock:
    """The error result that answers ``call`` when its outcome was lost."""
    return ToolResultBlock(
        tool_use_id=call.id, content=INTERRUPTED_RESULT.format(name=call.name), is_error=True
    )


def is_interrupted_result(block: ContentBlock, name: str) -> bool:
    """Whether ``block`` is the ``interrupted_result`` a restore gave a call to tool ``name``
    (the exact error text, not any error that mentions an interruption)."""
    return (
        type(block) is ToolResultBlock
        and block.is_error
        and block.content == INTERRUPTED_RESULT.format(name=name)
    )


def dangling_calls(messages: Sequence[HasBlocks]) -> list[DanglingCall]:
    """Every tool call no later result answers, in conversation order.

    A result answers the latest unanswered call of its id before it, so an id used again
    (the text dialects number calls by their place in a turn) pairs each call with its own
    result. Without any call the answer is one C-level scan; otherwise the work is one step
    per tool block.
    """
    blocks = list(chain.from_iterable(map(_BLOCKS, messages)))
    kinds = list(map(type, blocks))
    if ToolUseBlock not in kinds:
        return []
    waiting: dict[str, list[int]] = {}  # per call id, the flat places of its open calls
    for at in compress(range(len(kinds)), map(_TOOLS.__contains__, kinds)):
        block = blocks[at]
        if isinstance(block, ToolUseBlock):
            waiting.setdefault(block.id, []).append(at)
        else:
            calls = waiting.get(cast(ToolResultBlock, block).tool_use_id)
            if calls:
                calls.pop()
    left = sorted(chain.from_iterable(waiting.values()))
    if not left:
        return []
    owner = _owners(messages)
    return [DanglingCall(message=owner[at], call=cast(ToolUseBlock, blocks[at])) for at in left]


def answer_dangling(
    messages: list[_S], stored: Callable[..., _S], keep: frozenset[str] = frozenset()
) -> list[_S]:
    """``messages`` (stored ones) with every dangling call answered by its
    ``interrupted_result``, but those whose id is in ``keep`` (calls waiting for a person's
    approval: they are answered when decided); the very list when no call is answered.

    The answers of one message's calls go right after it: put ahead of the next message's
    blocks when that message is the calls' answer (a user message opening with a tool
    result), else as a user message of their own, ``stored(direction="outgoing",
    role="user", blocks=...)``. Either way every provider reads them as the message right
    after the calls, ahead of anything else said.
    """
    dangling = dangling_calls(messages)
    if keep:
        dangling = [d for d in dangling if d.call.id not in keep]
    if not dangling:
        return messages
    answers: dict[int, list[ContentBlock]] = {}
    for d in dangling:
        answers.setdefault(d.message, []).append(interrupted_result(d.call))
    out: list[_S] = []
    carried: list[ContentBlock] | None = None  # answers waiting for the message after the call
    for at, message in enumerate(messages):
        if carried is not None:
            if _is_answer(message):
                message = _joined(message, carried)
            else:
                out.append(stored(direction="outgoing", role="user", blocks=carried))
        out.append(message)
        carried = answers.get(at)
    if carried is not None:
        out.append(stored(direction="outgoing", role="user", blocks=carried))
    return out


def check_pairing(turns: list[Turn], conversation_id: str | None) -> None:
    """Refuse turns a provider would refuse for their tool pairing.

    The rule every dialect can send: the results of an assistant turn's calls come right
    after it, in the user turns that follow, ahead of anything else they say (turns with
    no blocks aside), one result per call; a result anywhere else answers no call.

    Raises:
        UnpairedToolCallError: a call without its result, or a result without its call,
            naming the conversation and the call id.
    """
    if _TOOLS.isdisjoint(map(type, chain.from_iterable(map(_BLOCKS, turns)))):
        return  # the usual render: one C-level scan, no list built
    blocks = list(chain.from_iterable(map(_BLOCKS, turns)))
    kinds = list(map(type, blocks))
    owner = _owners(turns)
    open_: dict[str, int] = {}  # the calling turn's unanswered call ids, a count each
    calling = last = -1  # the calling turn; the flat place of the group's last tool block
    answering = False  # a result of the group has been seen
    for at in compress(range(len(kinds)), map(_TOOLS.__contains__, kinds)):
        block = blocks[at]
        turn = owner[at]
        if isinstance(block, ToolUseBlock):
            if open_ and turn != calling:
                raise UnpairedToolCallError(conversation_id, next(iter(open_)), "result")
            calling, last, answering = turn, at, False
            open_[block.id] = open_.get(block.id, 0) + 1
            continue
        call_id = cast(ToolResultBlock, block).tool_use_id
        if not open_.get(call_id):
            raise UnpairedToolCallError(conversation_id, call_id, "call")
        adjacent = at == last + 1 if answering else owner[at - 1] == calling
        if not adjacent or turns[turn].role is not TurnRole.USER:
            raise UnpairedToolCallError(conversation_id, next(iter(open_)), "result")
        open_[call_id] -= 1
        if not open_[call_id]:
            del open_[call_id]
        last, answering = at, True
    if open_:
        raise UnpairedToolCallError(conversation_id, next(iter(open_)), "result")


def check_rendered(turns: list[Turn], conversation_id: str | None, settled: Settled[Any]) -> None:
    """``check_pairing`` for a client's call, walking only the turns of messages that an
    earlier check of the same render record did not already verify.

    A render keeps a record of its turns (the conversation's ``Settled``) that stays the
    same list for as long as the conversation holds the same message list, only appended
    to, with no message changed; the record notes how many of its turns a check verified
    (``verified``, back to 0 whenever it takes another list). Those messages are unchanged
    and ended with every call answered, so the walk starts fresh after them: the
    steady-state check is a C-level scan of the new turns, however long the history. The
    note lives on the conversation's own record, so no client keeps anything per
    conversation, and it is the conversation's whichever client checks next.

    Args:
        turns: the render's turns, one per message first.
        conversation_id: the conversation rendered (for the error).
        settled: the render's record of its turns (the context's), read right after the
            render made ``turns``.

    Raises:
        UnpairedToolCallError: as ``check_pairing``.
    """
    # the record's length as the render left it: a render that appended a message after
    # its walk (a late tool) has it checked again next time
    walked = len(settled.values)
    if settled.verified:
        turns = turns[settled.verified :]
    if _holds_tools(turns):
        check_pairing(turns, conversation_id)
    settled.verified = walked


def _holds_tools(turns: list[Turn]) -> bool:
    """Whether any block of ``turns`` is a tool call or result. A few turns (a render's new
    ones: the last answer and the new question) are looked at in a plain loop, which costs
    a third of building the C-level scan's iterators; more are scanned at C speed."""
    if len(turns) > _FEW:
        return not _TOOLS.isdisjoint(map(type, chain.from_iterable(map(_BLOCKS, turns))))
    for turn in turns:
        for block in turn.blocks:
            if type(block) in _TOOLS:
                return True
    return False


def _owners(holders: Sequence[HasBlocks] | Sequence[Turn]) -> list[int]:
    """For each block of the flattened ``holders``, the index of the one holding it."""
    sizes = map(len, map(_BLOCKS, holders))
    return list(chain.from_iterable(map(repeat, range(len(holders)), sizes)))


def _is_answer(message: _Stored) -> bool:
    """A user message opening with a tool result: the answer to the calls before it."""
    blocks = message.blocks
    return bool(blocks) and type(blocks[0]) is ToolResultBlock and message.role.lower() == "user"


def _joined(message: _S, results: list[ContentBlock]) -> _S:
    """``message`` (a stored struct) with ``results`` ahead of its blocks."""
    changed: Any = msgspec.structs.replace(cast(Any, message), blocks=[*results, *message.blocks])
    return cast(_S, changed)
