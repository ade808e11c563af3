"""Optional OpenTelemetry spans: a turn, each model call, each tool call, each save.

With ``opentelemetry-api`` installed (``pip install -e '.[otel]'``) spans go to whatever
tracer provider the application configured; without it every span is a no-op. Model-call
spans carry the GenAI semantic-convention attributes, cache tokens included.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Any

from parlour.runtime import LLMResponse
from parlour.runtime.compaction import FitReport

try:
    from opentelemetry import trace
except ImportError:  # the extra is not installed: spans are no-ops
    trace = None  # type: ignore[assignment]

_cached: tuple[Any, Any] = (None, None)  # (provider, its tracer)
OFF = contextlib.nullcontext(None)  # the span of a turn with no tracer: reusable, free


def tracer() -> Any:
    """parlour's tracer from the configured provider; None while none is configured (the
    API's default proxy records nothing, so the hot path skips it entirely). A turn looks
    it up once, at its start (the API reads the environment on every look-up)."""
    global _cached
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    if _cached[0] is not provider:
        _cached = (provider, provider.get_tracer("parlour"))
    return _cached[1]


__all__ = [
    "OFF",
    "approval_event",
    "compaction_event",
    "model_attributes",
    "span",
    "span_on",
    "tracer",
    "turn_span",
]


def span(name: str, **attributes: Any) -> AbstractContextManager[Any]:
    """A span named ``name`` on the tracer now (None without one); attributes set on it at
    once."""
    return span_on(tracer(), name, **attributes)


def span_on(current_tracer: Any, name: str, **attributes: Any) -> AbstractContextManager[Any]:
    """``span`` on a tracer looked up earlier (``tracer()``); a no-op context for None."""
    if current_tracer is None:
        return OFF
    return current_tracer.start_as_current_span(name, attributes=attributes)  # type: ignore[no-any-return]


def turn_span(current_tracer: Any, thinker: Any) -> AbstractContextManager[Any]:
    """The ``parlour.turn`` span of ``thinker``'s conversation on a tracer looked up
    earlier; the no-op context (nothing built) for None."""
    if current_tracer is None:
        return OFF
    cid = thinker.conversation_id
    return span_on(current_tracer, "parlour.turn", **{"parlour.conversation_id": cid})


def model_attributes(current: Any, response: LLMResponse) -> None:
    """Set the GenAI usage attributes of a finished model call on ``current``."""
    if current is None:
        return
    usage = response.usage
    current.set_attribute("gen_ai.response.model", response.model_id)
    current.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
    current.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
    current.set_attribute(
        "gen_ai.usage.cache_read.input_tokens", usage.cache_read_input_tokens or 0
    )
    current.set_attribute(
        "gen_ai.usage.cache_creation.input_tokens", usage.cache_creation_input_tokens or 0
    )
    current.set_attribute("gen_ai.response.finish_reasons", [response.stop_reason.value])


def compaction_event(report: FitReport) -> None:
    """A ``parlour.compaction`` span carrying a ``parlour.compaction`` event, both with the
    levels climbed and the tokens before and after; nothing while no tracer provider is
    configured."""
    attributes = {
        "parlour.compaction.levels": [level.value for level in report.levels],
        "parlour.compaction.tokens_before": report.tokens_before,
        "parlour.compaction.tokens_after": report.tokens_after,
    }
    with span("parlour.compaction", **attributes) as current:
        if current is not None:
            current.add_event("parlour.compaction", attributes)


def approval_event(what: str, tool: str, call_id: str, waited_s: float) -> None:
    """A ``parlour.approval`` span carrying a ``parlour.approval.<what>`` event
    (``requested``, ``approved``, ``denied``) with the tool, the call id and the seconds
    the call waited for its decision (0 when requested); nothing without a tracer."""
    attributes = {
        "parlour.approval.tool": tool,
        "parlour.approval.call_id": call_id,
        "parlour.approval.waited_s": waited_s,
    }
    with span("parlour.approval", **attributes) as current:
        if current is not None:
            current.add_event(f"parlour.approval.{what}", attributes)
