"""The usage ledger: what each model call and each compaction of a conversation cost.

It is never the conversation's token count (provider-reported tokens stay off the
conversation's own accounting). Entries are kept in memory per conversation, by the agent,
for the life of the process; they are not written to the store.
"""

from __future__ import annotations

import threading

import msgspec

from parlour.runtime import LLMResponse

__all__ = ["CompactionRecord", "ModelCallRecord", "UsageLedger"]


class ModelCallRecord(msgspec.Struct, frozen=True, kw_only=True, tag="model_call"):
    """One model call's provider-reported usage and how long it took."""

    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    latency_s: float


class CompactionRecord(msgspec.Struct, frozen=True, kw_only=True, tag="compaction"):
    """One compaction: its level and the conversation's tokens before and after."""

    level: str
    tokens_before: int
    tokens_after: int


class UsageLedger:
    """A conversation's ledger. Thread-safety: appends and reads may come from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[ModelCallRecord | CompactionRecord] = []

    def record_call(self, response: LLMResponse) -> None:
        usage = response.usage
        latency = 0.0
        if response.start_time is not None and response.end_time is not None:
            latency = (response.end_time - response.start_time).total_seconds()
        self._append(
            ModelCallRecord(
                model=response.model_id,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_input_tokens or 0,
                cache_write_tokens=usage.cache_creation_input_tokens or 0,
                latency_s=latency,
            )
        )

    def record_compaction(self, level: str, tokens_before: int, tokens_after: int) -> None:
        self._append(
            CompactionRecord(level=level, tokens_before=tokens_before, tokens_after=tokens_after)
        )

    def _append(self, entry: ModelCallRecord | CompactionRecord) -> None:
        with self._lock:
            self._entries.append(entry)

    def entries(self) -> list[ModelCallRecord | CompactionRecord]:
        with self._lock:
            return list(self._entries)
