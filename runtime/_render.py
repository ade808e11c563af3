"""The per-render pass over the messages: one walk maps every message to its turn and
gathers what reconciliation needs (tools announced in the stream, whether the notation is
used, which framework companions the stream already carries).

It is the hot path of every LLM call, so it walks each message once, touches each block
once, and keeps nothing between renders: the work of a render depends on the conversation's
size, never on how many renders came before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from parlour.runtime._messages import Message, OutgoingMessage
from parlour.runtime._prepared import Turn
from parlour.runtime._roles import TurnRole
from parlour.runtime.blocks import ContentBlock, PojoBlock, TextBlock, ToolDefinitionBlock

Process = Callable[[ContentBlock], ContentBlock]

# the two spellings every message uses, looked up without lowering; anything else goes
# through TurnRole.of, which maps other casings and refuses the rest (B27)
_ROLES = {"user": TurnRole.USER, "assistant": TurnRole.ASSISTANT}


class Scan:
    """What one walk over the messages found."""

    __slots__ = ("announced", "companions", "turns", "uses_notation")

    def __init__(self) -> None:
        self.turns: list[Turn] = []
        self.announced: dict[str, ToolDefinitionBlock] = {}
        self.uses_notation = False
        self.companions: set[str] = set()  # framework texts already said in the stream


class Renderer:
    """Maps messages to turns for one render: the dialect's flags and the block pipeline.

    Args:
        process: the transformation pipeline for a block that needs converting (a
            PojoBlock becomes a JsonBlock); every other block passes through as it is.
        native_tools: the dialect carries tools natively (drops ``tool_calls`` from
            response instructions).
        thinking_active: a native thinking block is guaranteed for this call.
        companions: framework texts to look for in app-authored stream messages.
    """

    __slots__ = ("_companions", "_native", "_process", "_thinking", "scan")

    def __init__(
        self,
        process: Process,
        native_tools: bool,
        thinking_active: bool,
        companions: Iterable[str] = (),
    ) -> None:
        self._process = process
        self._native = native_tools
        self._thinking = thinking_active
        self._companions = tuple(companions)
        self.scan = Scan()

    def walk(self, messages: Iterable[Message]) -> Scan:
        """Map each message to a turn, in order, and note what reconciliation needs.

        Raises:
            UncorrectableLLMError: a message's role is not user or assistant (B28).
        """
        turns = self.scan.turns
        for message in messages:
            turns.append(self.turn(message))
        return self.scan

    def turn(self, message: Message) -> Turn:
        role = _ROLES.get(message.role) or TurnRole.of(message.role)
        blocks = message.blocks
        if not blocks:
            raw = message.raw_content
            out: list[ContentBlock] = [TextBlock(text=raw)] if raw else []  # B37
        elif isinstance(message, OutgoingMessage):
            out = self._outgoing_blocks(message)
        else:
            out = [self._process(b) if type(b) is PojoBlock else b for b in blocks]
        if isinstance(message, OutgoingMessage) and message.response_handler is not None:
            self._add_instructions(message, out)
        return Turn(role=role, blocks=out, cache=message.cache)

    def _outgoing_blocks(self, message: OutgoingMessage) -> list[ContentBlock]:
        out = list(message.blocks)
        announced = self.scan.announced
        for i, block in enumerate(out):
            kind = type(block)
            if kind is PojoBlock:
                out[i] = self._process(block)
            elif kind is ToolDefinitionBlock:
                announced[block.name] = block  # type: ignore[union-attr,assignment]
        if message.app_authored and self._companions:
            self._note_companions(out)
        return out

    def _note_companions(self, blocks: list[ContentBlock]) -> None:
        for block in blocks:
            if isinstance(block, TextBlock):
                self.scan.companions.update(c for c in self._companions if c in block.text)

    def _add_instructions(self, message: OutgoingMessage, out: list[ContentBlock]) -> None:
        # instructions ride the turn of the message that asked, computed fresh at every
        # render and never written into the stored message (B22); an asking turn renders
        # the same every time, so the prefix ahead of the newest turn never moves
        handler = message.response_handler
        assert handler is not None
        if handler.uses_schema_notation():
            self.scan.uses_notation = True
        text = handler.response_instructions(self._native, self._thinking)
        if text:  # B23
            out.append(TextBlock(text=text))
