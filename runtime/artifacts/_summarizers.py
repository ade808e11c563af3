"""Summarizers: how a long ``LLMSummarizable`` text becomes ``[SUMMARY: N chars] ...``.

The truncating summarizer ships and is the default (no calls, safe anywhere); an
LLM-backed one is pluggable through ``LLMSummarizer(complete)``, where ``complete`` is the
application's own call to a model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from loguru import logger

from ..schema._markers import LLMSummarizable, SummarySize

__all__ = ["LLMSummarizer", "Summarizer", "TruncatingSummarizer", "summary_prefix"]

_BUDGETS = {SummarySize.BRIEF: 200, SummarySize.SHORT: 500, SummarySize.PARAGRAPHS: 1200}
# A prose phrase, never a number: a precise count invites a small model to verify it.
_PHRASES = {
    SummarySize.BRIEF: "a one or two sentence overview",
    SummarySize.SHORT: "a short summary of about a paragraph",
    SummarySize.PARAGRAPHS: "a summary of a couple of paragraphs",
}


def summary_prefix(text: str) -> str:
    """``[SUMMARY: N chars] `` where N is the original length."""
    return f"[SUMMARY: {len(text)} chars] "


class Summarizer(Protocol):
    """Turns a long text into its prefixed summary. Called once per artifact field."""

    def summarize(self, text: str, hint: LLMSummarizable | None) -> str: ...


class TruncatingSummarizer:
    """Keeps the first ~200 / 500 / 1200 characters (BRIEF / SHORT / PARAGRAPHS; SHORT when
    no marker is given), cut on a word boundary and ended with ``...``; a static summary
    wins outright. Stateless."""

    def summarize(self, text: str, hint: LLMSummarizable | None = None) -> str:
        if hint is not None and hint.static_summary:
            return summary_prefix(text) + hint.static_summary
        size = hint.size if hint is not None else SummarySize.SHORT
        return summary_prefix(text) + truncate(text, _BUDGETS[size])


def truncate(text: str, budget: int) -> str:
    """At most ``budget`` characters of ``text``, cut at a space, ``.``, ``,`` or newline
    within the last 50 when there is one, then ``...``; a text within budget is whole."""
    if len(text) <= budget:
        return text
    cut = budget
    for i in range(budget, max(budget - 50, 0), -1):
        if text[i] in " .,\n":
            cut = i
            break
    return text[:cut].strip() + "..."


class LLMSummarizer:
    """Asks a model for the summary through ``complete(prompt) -> str``.

    A static summary, a field marked ``llm_safe=False``, or a failing call falls back to
    truncation, so a summary is always produced.
    """

    def __init__(
        self,
        complete: Callable[[str], str],
        fallback: Summarizer | None = None,
    ) -> None:
        self._complete = complete
        self._fallback = fallback or TruncatingSummarizer()

    def summarize(self, text: str, hint: LLMSummarizable | None = None) -> str:
        if hint is not None and (hint.static_summary or not hint.llm_safe):
            return self._fallback.summarize(text, hint)
        size = hint.size if hint is not None else SummarySize.SHORT
        what = hint.hint if hint is not None and hint.hint else "text"
        prompt = f"Write {_PHRASES[size]} of the following {what}.\n\n{text}"
        try:
            summary = self._complete(prompt).strip()
        except Exception as exc:  # the model's failure must not cost the prompt its content
            logger.warning("LLM summarizer failed ({}); truncating instead", exc)
            return self._fallback.summarize(text, hint)
        return summary_prefix(text) + summary
