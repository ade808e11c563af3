"""What each summary call asks: the level's goal, how long the answer may be, the rule to
keep artifact references, and the content, as one ``SummaryRequest`` per call.

Length is weighted by age: the older the content, the shorter its summary. A target is a
share of the content's own length, bounded below and above, so a summary is always far
shorter than what it replaces; ``MAXIMUM``'s bounds are a fifth of ``AGGRESSIVE``'s.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from ._levels import CompactionLevel

__all__ = [
    "ARTIFACT_RULE",
    "CONVERSATION_SUMMARY_HEADER",
    "EXCHANGE_SUMMARY_HEADER",
    "TOOL_RESULT_SUMMARY_PREFIX",
    "SummaryRequest",
    "by_age",
    "collapse_request",
    "exchange_request",
    "kept_result_request",
    "second_pass_request",
    "tool_result_request",
]

ARTIFACT_RULE = (
    "Preserve any artifact references (text such as «artifact:type~id») exactly as written, "
    "so every artifact stays reachable."
)
CONVERSATION_SUMMARY_HEADER = "=== CONVERSATION SUMMARY ==="
EXCHANGE_SUMMARY_HEADER = "=== EARLIER EXCHANGE (SUMMARY) ==="
TOOL_RESULT_SUMMARY_PREFIX = "[Summary of a tool result of "

_GOALS = {
    CompactionLevel.LIGHT: (
        "Summarize this tool result so the assistant can go on without the full output: "
        "keep what it returned that matters for the task."
    ),
    CompactionLevel.MODERATE: (
        "Summarize this one earlier exchange (the request, the tool calls made and what "
        "they returned, and the answer) so the conversation can continue without it."
    ),
    CompactionLevel.AGGRESSIVE: (
        "Summarize the earlier conversation into one account the assistant can continue "
        "from: the task, what was done, what was found and decided, and what is still open."
    ),
    CompactionLevel.MAXIMUM: (
        "Condense the earlier conversation to its bare essentials: the task, the decisive "
        "facts and results, and what remains to do. This is the last step before the "
        "conversation is refused for its size, so be as brief as you can."
    ),
}
_SECOND_PASS_GOAL = (
    "Shorten this summary of a conversation further, keeping the task, the decisive facts "
    "and what remains to do."
)


class Detail(NamedTuple):
    phrase: str
    share: float  # of the content's words
    floor: int
    cap: int


# Oldest quarter first: the older the content, the terser its summary.
_BY_AGE = (
    Detail("very concise: one or two lines", 0.05, 15, 40),
    Detail("concise: two or three lines", 0.10, 25, 80),
    Detail("moderately detailed: three to five lines", 0.20, 40, 150),
    Detail("detailed: keep every fact, decision and open question", 0.35, 60, 300),
)
_COLLAPSE = {
    CompactionLevel.AGGRESSIVE: Detail("one account of a few paragraphs", 0.10, 150, 1_500),
    CompactionLevel.MAXIMUM: Detail("a handful of lines, nothing more", 0.02, 30, 300),
}
_KEPT_RESULT = {
    CompactionLevel.AGGRESSIVE: Detail("a short paragraph", 0.25, 50, 600),
    CompactionLevel.MAXIMUM: Detail("one or two lines", 0.05, 20, 120),
}


class SummaryRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One summary to write: the level asking, its goal, the length wanted, the content."""

    level: CompactionLevel
    goal: str
    detail: str
    target_words: int
    content: str

    @property
    def prompt(self) -> str:
        """The whole prompt a summary model is sent."""
        return (
            "You are compacting part of a long conversation between a user and an AI "
            "assistant so that it fits the model's context window.\n"
            f"Goal: {self.goal}\n"
            f"Length: {self.detail}; at most about {self.target_words} words.\n"
            "Keep names, numbers, decisions, errors and open questions. "
            f"{ARTIFACT_RULE} Write only the summary.\n\n"
            f"=== CONTENT TO SUMMARIZE ===\n{self.content}"
        )


def _target(detail: Detail, content: str) -> int:
    words = len(content.split())
    return max(1, min(words, max(detail.floor, min(detail.cap, round(words * detail.share)))))


def by_age(position: int, count: int) -> Detail:
    """The detail for the ``position``-th of ``count`` pieces, oldest first."""
    quarter = min(3, 4 * position // max(count, 1))
    return _BY_AGE[quarter]


def tool_result_request(content: str, detail: Detail) -> SummaryRequest:
    return SummaryRequest(
        level=CompactionLevel.LIGHT,
        goal=_GOALS[CompactionLevel.LIGHT],
        detail=detail.phrase,
        target_words=_target(detail, content),
        content=content,
    )


def kept_result_request(content: str, level: CompactionLevel) -> SummaryRequest:
    """A tool result a collapse must keep (the latest one, or a kept call's partner)."""
    detail = _KEPT_RESULT[level]
    return SummaryRequest(
        level=level,
        goal=_GOALS[CompactionLevel.LIGHT],
        detail=detail.phrase,
        target_words=_target(detail, content),
        content=content,
    )


def exchange_request(content: str, detail: Detail) -> SummaryRequest:
    return SummaryRequest(
        level=CompactionLevel.MODERATE,
        goal=_GOALS[CompactionLevel.MODERATE],
        detail=detail.phrase,
        target_words=_target(detail, content),
        content=content,
    )


def collapse_request(content: str, level: CompactionLevel) -> SummaryRequest:
    detail = _COLLAPSE[level]
    return SummaryRequest(
        level=level,
        goal=_GOALS[level],
        detail=detail.phrase,
        target_words=_target(detail, content),
        content=content,
    )


def second_pass_request(summary: str, first: SummaryRequest) -> SummaryRequest:
    """A pass over a summary that came back longer than its target."""
    return SummaryRequest(
        level=first.level,
        goal=_SECOND_PASS_GOAL,
        detail=first.detail,
        target_words=first.target_words,
        content=summary,
    )
