"""The per-render pass over the messages: one walk maps every message to its turn and
gathers what reconciliation needs (tools announced in the stream, whether the notation is
used, which framework companions the stream already carries). The transformation pipeline
(``to_llm_block``, ``render_slot``) is here too: every block of every turn and every
objective slot goes through it, so the head and the turns render alike; with a registry, a
PojoBlock becomes model-facing JSON with artifacts as references and long fields summarized.

It is the hot path of every LLM call, so it walks each message once and touches each block
once. A turn that depends on its message alone (no PojoBlock to convert, no response
instructions) is memoized on the message, which forgets it on any change; so a render of a
long conversation mostly re-reads turns it already built, and its work never depends on how
many renders came before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import compress
from operator import attrgetter, not_

import msgspec

from ._messages import Message, OutgoingMessage, _set_turn, last_change
from ._prepared import Turn
from ._roles import TurnRole
from ._settled import Settled
from .artifacts._registry import ArtifactRegistry
from .artifacts._serializer import write_summarized_with_refs
from .artifacts._summarizers import Summarizer
from .blocks import (
    ContentBlock,
    JsonBlock,
    PojoBlock,
    TextBlock,
    ToolDefinitionBlock,
    render_text,
)

Process = Callable[[ContentBlock], ContentBlock]

# the two spellings every message uses, looked up without lowering; anything else goes
# through TurnRole.of, which maps other casings and refuses the rest
_ROLES = {"user": TurnRole.USER, "assistant": TurnRole.ASSISTANT}
# the block kinds a render must look at; a message holding none of them is copied as it is
_NOTABLE = frozenset({PojoBlock, ToolDefinitionBlock})
_json = msgspec.json.Encoder()
_MEMO = attrgetter("_turn")  # a message's memoized Turn, or None


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

    __slots__ = ("_companions", "_instructions", "_native", "_process", "_thinking", "scan")

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
        # one handler instance asks many turns: its instructions block is built once per
        # render (by identity; the handlers are alive for the whole render) and shared
        self._instructions: dict[int, TextBlock | None] = {}
        self.scan = Scan()

    def walk(self, messages: list[Message], settled: Settled[Turn | None] | None = None) -> Scan:
        """Map each message to a turn, in order, and note what reconciliation needs (the
        framework companions only when asked: ``note_companions``).

        A memoized turn adds nothing to the scan (no definition, no pipeline, no
        instructions), so only the messages without one (new, changed, or depending on
        more than themselves) take the full path, in message order. With ``settled`` (the
        conversation's, kept from its previous render) the memos of the settled messages
        are not even read again, so a render costs the same however long the history.

        Raises:
            UncorrectableLLMError: a message's role is not user or assistant.
        """
        stamp = last_change()
        settled = Settled() if settled is None else settled
        known = settled.settled(messages, stamp)
        # a memo per settled message, None for an impure one; appended to below
        kept: list[Turn | None] = settled.values if known else []
        impure = settled.gaps if known else []  # still impure: nothing of them changed
        tail = list(map(_MEMO, messages[known:]))
        new = [known + at for at in compress(range(len(tail)), map(not_, tail))]
        turns = kept + tail
        for at in impure + new:  # ascending: the order in which the scan notes them
            turns[at] = self._fresh_turn(messages[at])
        if known < len(messages) or not known:
            impure = impure + [at for at in new if messages[at]._turn is None]
            kept += map(_MEMO, messages[known:])
            settled.keep(messages, kept, stamp, impure)
        self.scan.turns = turns
        return self.scan

    def note_companions(self, messages: Sequence[Message]) -> None:
        """Note which framework companions the app-authored outgoing messages already say,
        in the turns ``walk`` built for ``messages`` (reconciliation asks only when it may
        have a companion to add)."""
        if not self._companions:
            return
        for message, turn in zip(messages, self.scan.turns, strict=True):
            if message.app_authored and isinstance(message, OutgoingMessage):
                self._note_companions(turn.blocks)

    def turn(self, message: Message) -> Turn:
        """The turn of one message; the message itself is never modified (a turn that
        depends on nothing but the message is memoized on it until it changes)."""
        memo: Turn | None = message._turn
        return self._fresh_turn(message) if memo is None else memo

    def _fresh_turn(self, message: Message) -> Turn:
        role = _ROLES.get(message.role) or TurnRole.of(message.role)
        pure = True  # the turn depends on the message alone: no pipeline, no instructions
        blocks = message.blocks
        if not blocks:
            raw = message.raw_content
            out: list[ContentBlock] = [TextBlock(text=raw)] if raw else []
        elif _NOTABLE.isdisjoint(map(type, blocks)):
            out = list(blocks)  # the common case, checked and copied at C speed
        else:
            out = self._convert(message)
            pure = False
        if isinstance(message, OutgoingMessage) and message.response_handler is not None:
            self._add_instructions(message, out)
            pure = False
        turn = Turn(role=role, blocks=out, cache=message.cache)
        if pure:
            _set_turn(message, turn)  # a memo, no change: nothing to forget
        return turn

    def _convert(self, message: Message) -> list[ContentBlock]:
        """Blocks through the pipeline; an outgoing definition is noted as announced."""
        out = list(message.blocks)
        outgoing = isinstance(message, OutgoingMessage)
        for i, block in enumerate(out):
            if isinstance(block, PojoBlock):
                out[i] = self._process(block)
            elif outgoing and isinstance(block, ToolDefinitionBlock):
                self.scan.announced[block.name] = block
        return out

    def _note_companions(self, blocks: list[ContentBlock]) -> None:
        for block in blocks:
            if isinstance(block, TextBlock):
                self.scan.companions.update(c for c in self._companions if c in block.text)

    def _add_instructions(self, message: OutgoingMessage, out: list[ContentBlock]) -> None:
        # instructions ride the turn of the message that asked, computed fresh at every
        # render and never written into the stored message; an asking turn renders
        # the same every time, so the prefix ahead of the newest turn never moves
        handler = message.response_handler
        key = id(handler)
        if key not in self._instructions:
            assert handler is not None
            if handler.uses_schema_notation():
                self.scan.uses_notation = True
            text = handler.response_instructions(self._native, self._thinking)
            self._instructions[key] = TextBlock(text=text) if text else None
        block = self._instructions[key]
        if block is not None:
            out.append(block)


def to_llm_block(
    block: ContentBlock,
    registry: ArtifactRegistry | None = None,
    summarizer: Summarizer | None = None,
) -> ContentBlock:
    """The transformation pipeline for one block: a PojoBlock becomes a JsonBlock; every
    other kind passes through unchanged.

    With a registry, the JSON is the model-facing write: artifacts registered and replaced
    by ``{"@ref": ...}``, long summarizable fields summarized.
    """
    if isinstance(block, PojoBlock):
        if registry is not None:
            return JsonBlock(json=write_summarized_with_refs(block.value, registry, summarizer))
        return JsonBlock(json=_json.encode(block.value).decode())
    return block


def render_slot(
    block: ContentBlock,
    registry: ArtifactRegistry | None = None,
    summarizer: Summarizer | None = None,
) -> str:
    """The text an objective slot contributes to ``system_text``, through the same pipeline
    as the turns."""
    if isinstance(block, TextBlock):
        return block.text
    return render_text(to_llm_block(block, registry, summarizer))
