"""The usage ledger: what each model call and each compaction of a conversation cost.

It is never the conversation's token count (provider-reported tokens stay off the
conversation's own accounting) and never reaches a model. The entries live on the
conversation itself (``ConversationContext.usage_ledger``, in their plain form), so they are
saved with it at the turn's next boundary and come back after a restart; the agent keeps a
decoded copy per conversation so ``chat.usage()`` can be read from any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import msgspec
from loguru import logger

from parlour.runtime import ConversationContext, LLMResponse
from parlour.runtime.compaction import FitReport

__all__ = ["CompactionRecord", "LedgerEntry", "ModelCallRecord", "UsageLedger", "decode_entries"]


class ModelCallRecord(msgspec.Struct, frozen=True, kw_only=True, tag="model_call"):
    """One model call's provider-reported usage and how long it took. ``purpose`` is
    ``answer`` for the turn's own calls and ``summary`` for a compaction's summary calls
    (their latency is not measured: 0)."""

    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    latency_s: float
    purpose: str = "answer"


class CompactionRecord(msgspec.Struct, frozen=True, kw_only=True, tag="compaction"):
    """One rung of a compaction: its level and the conversation's tokens before and after."""

    level: str
    tokens_before: int
    tokens_after: int


LedgerEntry = ModelCallRecord | CompactionRecord


def decode_entries(plain: Iterable[dict[str, Any]]) -> list[LedgerEntry]:
    """The entries of a stored ledger; an entry this version cannot read is skipped (and
    logged), never a reason to refuse the conversation."""
    entries: list[LedgerEntry] = []
    for item in plain:
        try:
            entries.append(msgspec.convert(item, LedgerEntry))
        except msgspec.ValidationError as exc:
            logger.warning("a usage ledger entry was skipped: {}", exc)
    return entries


class UsageLedger:
    """A conversation's ledger, as the agent sees it.

    ``seed`` and the ``record_*`` methods run in the owner's thread during a turn (they
    write the conversation); ``entries`` may be read from any thread. Every ledger of the
    process shares one lock (each holds it for a few list operations), and a ledger has no
    ``__dict__``: a host keeps one per live conversation.
    """

    __slots__ = ("__weakref__", "_entries", "seeded")  # the agent holds its ledgers weakly
    _lock = threading.Lock()

    def __init__(self) -> None:
        self._entries: list[LedgerEntry] = []
        self.seeded = False

    def seed(self, context: ConversationContext) -> None:
        """Take the entries of ``context`` when a turn obtains it (decoded again only when
        they differ in number from this copy: another agent's turn, a restart)."""
        with self._lock:
            if not self.seeded or len(self._entries) != len(context.usage_ledger):
                self._entries = decode_entries(context.usage_ledger)
                self.seeded = True

    def record_call(self, context: ConversationContext, response: LLMResponse) -> None:
        usage = response.usage
        latency = 0.0
        if response.start_time is not None and response.end_time is not None:
            latency = (response.end_time - response.start_time).total_seconds()
        self._append(
            context,
            ModelCallRecord(
                model=response.model_id,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_input_tokens or 0,
                cache_write_tokens=usage.cache_creation_input_tokens or 0,
                latency_s=latency,
            ),
        )

    def record_compaction(self, context: ConversationContext, report: FitReport) -> None:
        """Each rung climbed, then each summary call with its own usage."""
        for step in report.steps:
            record = CompactionRecord(
                level=step.level.value,
                tokens_before=step.tokens_before,
                tokens_after=step.tokens_after,
            )
            self._append(context, record)
        for call in report.calls:
            usage = call.usage
            self._append(
                context,
                ModelCallRecord(
                    model=call.model_id or "unknown",
                    input_tokens=usage.input_tokens if usage else 0,
                    output_tokens=usage.output_tokens if usage else 0,
                    cache_read_tokens=(usage.cache_read_input_tokens or 0) if usage else 0,
                    cache_write_tokens=(usage.cache_creation_input_tokens or 0) if usage else 0,
                    latency_s=0.0,
                    purpose="summary",
                ),
            )

    def _append(self, context: ConversationContext, entry: LedgerEntry) -> None:
        context.usage_ledger.append(msgspec.to_builtins(entry))
        with self._lock:
            self._entries.append(entry)

    def entries(self) -> list[LedgerEntry]:
        with self._lock:
            return list(self._entries)
