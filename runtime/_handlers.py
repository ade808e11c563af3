"""Response handlers: what the model is asked to answer, and how its answer is read back."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class ResponseHandler(Protocol):
    """Stateless: one instance may serve many conversations on many threads at once."""

    def response_instructions(
        self, native_tools_available: bool, thinking_active: bool
    ) -> str | None:
        """Instructions appended to the last turn at render, or None for none."""
        ...

    def uses_schema_notation(self) -> bool:
        """True when the instructions use the @-notation, so the legend must be in the head."""
        ...

    def parse(self, text: str) -> Any:
        """Read the model's answer text back into the handler's result."""
        ...


class StringResponseHandler:
    """Plain prose: no instructions, no schema notation, the answer is the text itself."""

    def response_instructions(
        self, native_tools_available: bool, thinking_active: bool
    ) -> str | None:
        return None

    def uses_schema_notation(self) -> bool:
        return False

    def parse(self, text: str) -> str:
        return text


class ContentFormatter(Protocol):
    """A provider dialect's view of rendering: does it carry tools natively?"""

    def supports_native_tool_calling(self) -> bool: ...


class GenericContentFormatter:
    """The text dialect: tools render inline as text."""

    def supports_native_tool_calling(self) -> bool:
        return False


class NativeToolsFormatter:
    """A dialect with a native tools parameter (Anthropic, OpenAI)."""

    def supports_native_tool_calling(self) -> bool:
        return True
