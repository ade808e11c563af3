"""The levels as plans: each plan reads the messages, asks for the summaries it needs in
batches, and returns the new message list without touching the old one.

A plan is a generator: it yields a batch of ``SummaryRequest``s, is sent back their
summaries in the same order, and returns the rewritten list. The same plan therefore runs
under a synchronous driver (one call after another) and an asynchronous one (each batch
gathered concurrently), and the conversation is replaced only once a plan has finished,
so a failed summary leaves every message as it was.

Every kept message stays the same instance; a rewritten one is a new message of the same
class with the same flags. A summary that weighs as many tokens as what it would replace
(or more) is not used.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from .._messages import IncomingMessage, Message, OutgoingMessage
from .._transcript import Transcript
from ..blocks import ContentBlock, TextBlock, ToolResultBlock
from ..models._tokens import counter_for
from ._levels import CompactionLevel
from ._prompts import (
    CONVERSATION_SUMMARY_HEADER,
    EXCHANGE_SUMMARY_HEADER,
    TOOL_RESULT_SUMMARY_PREFIX,
    SummaryRequest,
    by_age,
    collapse_request,
    exchange_request,
    kept_result_request,
    second_pass_request,
    tool_result_request,
)
from ._segments import (
    exchanges,
    holders,
    is_protected,
    kept_spans,
    latest_outgoing,
    pair_closure,
    safe_position,
)

__all__ = ["Plan", "plan_for"]

Plan = Generator[list[SummaryRequest], list[str], list[Message]]
Spot = tuple[int, int, SummaryRequest]  # message index, block index, its request
Job = tuple[list[int], SummaryRequest, str]  # collapsed indices, request, header

_SECOND_PASS_SLACK = 1.25  # a MAXIMUM summary this much over its target gets a second pass


def plan_for(level: CompactionLevel, messages: Sequence[Message], min_result_chars: int) -> Plan:
    """The plan of ``level`` over ``messages``."""
    if level is CompactionLevel.LIGHT:
        return _light(messages, min_result_chars)
    if level is CompactionLevel.MODERATE:
        return _moderate(messages)
    return _collapse(messages, level, min_result_chars)


# -- the levels --------------------------------------------------------------------------------


def _light(messages: Sequence[Message], min_chars: int) -> Plan:
    """Every compactable tool result, but the latest outgoing message's, summarized in place;
    the older its exchange, the shorter."""
    latest = latest_outgoing(messages)
    cuts = exchanges(messages)
    spots: list[Spot] = []
    for position, cut in enumerate(cuts):
        detail = by_age(position, len(cuts))
        eligible = [i for i in cut if i != latest and not is_protected(messages[i])]
        for i, j, content in _results(messages, eligible, min_chars):
            spots.append((i, j, tool_result_request(content, detail)))
    summaries = yield [request for _, _, request in spots]
    return _replace_results(messages, spots, summaries)


def _moderate(messages: Sequence[Message]) -> Plan:
    """Each earlier exchange's compactable messages become one summary, the older the
    shorter; the latest exchange and every non-compactable message stay as they are."""
    latest = latest_outgoing(messages)
    cuts = exchanges(messages)
    current = next((c for c in cuts if latest in c), cuts[-1] if cuts else None)
    earlier = [c for c in cuts if c is not current]
    held = holders(messages)
    jobs: list[Job] = []
    for position, cut in enumerate(earlier):
        kept = pair_closure(messages, [i for i in cut if is_protected(messages[i])], held)
        collapsed = [i for i in cut if i not in kept]
        if collapsed and not _already_summarized(messages, collapsed):
            content = _transcript(messages, collapsed)
            request = exchange_request(content, by_age(position, len(earlier)))
            jobs.append((collapsed, request, EXCHANGE_SUMMARY_HEADER))
    summaries = yield [request for _, request, _ in jobs]
    return _collapse_jobs(messages, jobs, summaries)


def _collapse(messages: Sequence[Message], level: CompactionLevel, min_chars: int) -> Plan:
    """Everything but the protected messages (non-compactable ones and the framework's
    announcements, the latest outgoing one, and the tool partners of all of them) becomes
    one summary; tool results the collapse must keep
    get summaries of their own. ``MAXIMUM`` aims far shorter and passes over its own
    summary again when it came back too long."""
    protected = [i for i, m in enumerate(messages) if is_protected(m)]
    latest = latest_outgoing(messages)
    kept = pair_closure(messages, [*protected, *([] if latest is None else [latest])])
    collapsed = [i for i in range(len(messages)) if i not in kept]
    eligible = sorted(i for i in kept if not is_protected(messages[i]))
    spots = [
        (i, j, kept_result_request(c, level)) for i, j, c in _results(messages, eligible, min_chars)
    ]
    jobs: list[Job] = []
    if collapsed and (
        level is CompactionLevel.MAXIMUM or not _already_summarized(messages, collapsed)
    ):
        request = collapse_request(_transcript(messages, collapsed), level)
        jobs.append((collapsed, request, CONVERSATION_SUMMARY_HEADER))
    summaries = yield [request for _, request, _ in jobs] + [r for _, _, r in spots]
    collapsed_summaries, result_summaries = summaries[: len(jobs)], summaries[len(jobs) :]
    if jobs and level is CompactionLevel.MAXIMUM:
        collapsed_summaries = [(yield from _second_pass(jobs[0][1], collapsed_summaries[0]))]
    rewritten = _replace_results(messages, spots, result_summaries)
    return _collapse_jobs(rewritten, jobs, collapsed_summaries)


def _second_pass(
    request: SummaryRequest, summary: str
) -> Generator[list[SummaryRequest], list[str], str]:
    """A summary that came back well over its target, summarized once more (the shorter of
    the two is kept)."""
    if len(summary.split()) <= request.target_words * _SECOND_PASS_SLACK:
        return summary
    again = yield [second_pass_request(summary, request)]
    return _shorter(again[0], summary)


# -- reading -----------------------------------------------------------------------------------


def _results(
    messages: Sequence[Message], indices: Sequence[int], min_chars: int
) -> list[tuple[int, int, str]]:
    """The tool results worth a summary in the given messages: long, not summaries already."""
    found = []
    for i in indices:
        for j, block in enumerate(messages[i].blocks):
            if (
                isinstance(block, ToolResultBlock)
                and len(block.content) >= min_chars
                and not block.content.startswith(TOOL_RESULT_SUMMARY_PREFIX)
            ):
                found.append((i, j, block.content))
    return found


def _transcript(messages: Sequence[Message], indices: Sequence[int]) -> str:
    return Transcript.render_messages(messages[i] for i in indices)


def _already_summarized(messages: Sequence[Message], collapsed: Sequence[int]) -> bool:
    """A lone summary this compactor wrote: summarizing it again only loses detail."""
    if len(collapsed) != 1:
        return False
    text = messages[collapsed[0]].raw_content
    return text.startswith((EXCHANGE_SUMMARY_HEADER, CONVERSATION_SUMMARY_HEADER))


def _weight(message: Message) -> int:
    """A message's tokens as the conversation's count weighs them (default encoding; typed
    data and tool definitions weigh nothing here, so originals are never overweighed)."""
    return counter_for(None).count_message(message, _unrendered)


def _unrendered(block: ContentBlock) -> str:
    return ""


def _shorter(candidate: str, current: str) -> str:
    return candidate if len(candidate) < len(current) else current


# -- writing -----------------------------------------------------------------------------------


def _replace_results(
    messages: Sequence[Message], spots: Sequence[Spot], summaries: Sequence[str]
) -> list[Message]:
    """``messages`` with each spot's tool result replaced by its summary (ids kept)."""
    by_message: dict[int, dict[int, str]] = {}
    for (i, j, _), summary in zip(spots, summaries, strict=True):
        by_message.setdefault(i, {})[j] = summary
    out = list(messages)
    for i, changes in by_message.items():
        blocks = [_summarized(b, changes.get(j)) for j, b in enumerate(messages[i].blocks)]
        if any(a is not b for a, b in zip(blocks, messages[i].blocks, strict=True)):
            out[i] = rebuilt(messages[i], blocks)
    return out


def _summarized(block: ContentBlock, summary: str | None) -> ContentBlock:
    if summary is None or not isinstance(block, ToolResultBlock):
        return block
    content = f"{TOOL_RESULT_SUMMARY_PREFIX}{len(block.content)} characters] {summary}"
    counter = counter_for(None)
    if counter.count(content) >= counter.count(block.content):
        return block
    return ToolResultBlock(tool_use_id=block.tool_use_id, content=content, is_error=block.is_error)


def _collapse_jobs(
    messages: Sequence[Message], jobs: Sequence[Job], summaries: Sequence[str]
) -> list[Message]:
    """``messages`` with each job's collapsed messages replaced by one summary message,
    placed where the first of them was unless that would split a kept tool pair."""
    used: list[tuple[list[int], Message]] = []
    for (collapsed, _, header), summary in zip(jobs, summaries, strict=True):
        candidate = summary_message(header, summary)
        if _weight(candidate) < sum(_weight(messages[i]) for i in collapsed):
            used.append((collapsed, candidate))
    removed = {i for collapsed, _ in used for i in collapsed}
    kept = {i for i in range(len(messages)) if i not in removed}
    spans = kept_spans(holders(messages), kept) if used else []
    inserts: dict[int, list[Message]] = {}
    for collapsed, replacement in used:
        at = safe_position(collapsed[0], spans)
        inserts.setdefault(at, []).append(replacement)
    out: list[Message] = []
    for i, message in enumerate(messages):
        out.extend(inserts.get(i, ()))
        if i in kept:
            out.append(message)
    out.extend(inserts.get(len(messages), ()))
    return out


def summary_message(header: str, summary: str) -> OutgoingMessage:
    """A user-role, app-authored summary message, compactable like any other."""
    text = f"{header}\n{summary}"
    return OutgoingMessage(text, [TextBlock(text=text)], app_authored=True)


def rebuilt(message: Message, blocks: list[ContentBlock]) -> Message:
    """A new message like ``message`` (class, role, flags, handler) with ``blocks``."""
    content = message.raw_content if message.has_raw_text else None
    flags: dict[str, Any] = {
        "compactable": message.compactable,
        "app_authored": message.app_authored,
        "cache": message.cache,
        "requested_output_tokens": message.requested_output_tokens,
    }
    if isinstance(message, OutgoingMessage):
        handler = message.response_handler
        return OutgoingMessage(
            content, blocks, response_handler=handler, role=message.role, **flags
        )
    if isinstance(message, IncomingMessage):
        handler = message.response_handler
        return IncomingMessage(
            content, blocks, response_handler=handler, role=message.role, **flags
        )
    return Message(message.role, content, blocks, **flags)
