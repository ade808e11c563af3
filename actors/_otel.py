"""Optional OpenTelemetry spans: a turn, each model call, each tool call, each save.

With ``opentelemetry-api`` installed (``pip install 'parlour[otel]'``) spans go to whatever
tracer provider the application configured; without it every span is a no-op. Model-call
spans carry the GenAI semantic-convention attributes, cache tokens included.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from parlour.runtime import LLMResponse

try:
    from opentelemetry import trace
except ImportError:  # the extra is not installed: spans are no-ops
    trace = None  # type: ignore[assignment]

_cached: tuple[Any, Any] = (None, None)  # (provider, its tracer)


def _tracer() -> Any:
    """parlour's tracer from the configured provider; None while none is configured (the
    API's default proxy records nothing, so the hot path skips it entirely)."""
    global _cached
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    if _cached[0] is not provider:
        _cached = (provider, provider.get_tracer("parlour"))
    return _cached[1]


__all__ = ["model_attributes", "span"]


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    """A span named ``name`` (None without OpenTelemetry); attributes set on it at once."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    with tracer.start_as_current_span(name, attributes=attributes) as current:
        yield current


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
