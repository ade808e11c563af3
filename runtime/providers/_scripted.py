"""ScriptedClient: an offline model that answers deterministically, and can call tools.

It is the default wherever no provider key is configured, so that everything in parlour
runs with no network. It goes through the same client template as the real providers, so
budgets, truncation and refusals behave exactly as they do on the wire.
"""

from __future__ import annotations

import json
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import msgspec

from .._prepared import PreparedConversation, Turn
from .._roles import Depth, OutputSize, TurnRole
from ..blocks import (
    ContentBlock,
    TextBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from ..models._budget import OutputDeclaration
from ..models._catalog_data import DEFAULT_SPECS
from ..models._spec import ModelSpec
from ._response import LLMResponse, StopReason, Usage
from ._scripted_args import arguments_for, tool_asked_for
from ._template import LLMClient, TextCallback, WireRequest

Reply = str | LLMResponse | Callable[[PreparedConversation], LLMResponse]

SCRIPTED_SPEC: ModelSpec = next(s for s in DEFAULT_SPECS if s.id == "scripted")


class ScriptedClient(LLMClient):
    """Answers from a script, then by a deterministic default.

    Args:
        replies: answers used in order, each a text, a ready ``LLMResponse``, or a function
            of the prepared conversation, shared by every conversation. When they run out
            (or none are given) the default applies: a turn whose last user message names a
            declared tool (its name, or a word of it: "weather" for ``get_weather``) calls
            that tool, with arguments made from its schema (every required property: see
            ``arguments_for``); a turn answering tool results reports them; anything else
            is echoed.
        scripts: answers per conversation id, used before the shared ``replies`` for that
            conversation's calls (``script`` adds more once a conversation's id is known).
        model_id: the id reported on every response (and of the spec, when none is given).
        spec: the model it stands in for; a conversation bound to any provider's model is
            served too, so budgets can be tested against real specs offline.
        depth, output_declaration: the binding it attaches to an unbound conversation that
            declares nothing (``IMMEDIATE``, ``STANDARD``), so the offline default just runs.
            Pass None for both to resolve declarations exactly as the real clients do: an
            undeclared depth or output size is refused with the same error.
        requests: if given, every ``WireRequest`` sent is appended to it, for assertions.

    Thread-safety: with a script, replies are consumed in call order across threads; the
    default policy is a pure function of the prepared conversation.
    """

    _serves_any = True

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        model_id: str = "scripted",
        spec: ModelSpec | None = None,
        depth: Depth | None = Depth.IMMEDIATE,
        output_declaration: OutputDeclaration | None = OutputSize.STANDARD,
        requests: list[WireRequest] | None = None,
        scripts: Mapping[str, Iterable[Reply]] | None = None,
    ) -> None:
        if spec is None:
            spec = SCRIPTED_SPEC if model_id == "scripted" else _renamed(SCRIPTED_SPEC, model_id)
        super().__init__(spec, depth=depth, output_declaration=output_declaration)
        self._replies: deque[Reply] = deque(replies)
        self._scripts: dict[str, deque[Reply]] = {}
        self.requests = requests
        self._tallies = _Tallies()
        own = type(self)  # a subclass that answers otherwise may block: not inline
        self._inline = not any(callable(r) for r in self._replies) and all(
            getattr(own, name) is getattr(ScriptedClient, name)
            for name in ("respond", "_send", "_asend", "_stream", "_send_with", "_default")
        )
        for conversation_id, answers in (scripts or {}).items():
            self.script(conversation_id, *answers)

    def script(self, conversation_id: str, *replies: Reply) -> None:
        """Queue ``replies`` for ``conversation_id``'s next calls (after those it has
        queued), ahead of the shared replies; other conversations never see them.

        Thread-safety: any thread; each conversation's answers are taken in call order.
        """
        self._scripts.setdefault(conversation_id, deque()).extend(replies)
        if any(callable(r) for r in replies):
            self._inline = False  # a function may block: its calls go to a model worker

    @property
    def answers_inline(self) -> bool:
        """True unless a reply is a function or a subclass answers its own way: either may
        block (waiting on a test's event, say), so its calls go to a model worker."""
        return self._inline

    def _send(self, request: WireRequest) -> LLMResponse:
        if self.requests is not None:
            self.requests.append(request)
        prepared = request.prepared
        own = self._scripts.get(request.conversation_id or "")
        try:
            reply = own.popleft() if own else self._replies.popleft()
        except IndexError:
            return self._default(request)
        if isinstance(reply, str):
            tally = self._tallies.of(request.conversation_id, prepared.turns)
            return _response([TextBlock(text=reply)], prepared, tally, request.spec.id)
        if isinstance(reply, LLMResponse):
            return reply
        return reply(prepared)

    async def _asend(self, request: WireRequest, on_text: TextCallback | None) -> LLMResponse:
        return self._send_with(request, on_text)  # no I/O: it answers on the loop itself

    def _stream(self, request: WireRequest) -> Iterator[str | LLMResponse]:
        """Streams the answer word by word, as a provider would in deltas."""
        response = self._send(request)
        yield from _words(response.text)
        yield response

    def _send_with(self, request: WireRequest, on_text: TextCallback | None) -> LLMResponse:
        """``_stream``'s deltas handed to ``on_text`` in a plain loop (no generator); a
        subclass that streams otherwise (its own ``_stream``) is read through it."""
        if on_text is not None and type(self)._stream is not ScriptedClient._stream:
            return super()._send_with(request, on_text)
        response = self._send(request)
        if on_text is not None:
            for word in _words(response.text):
                on_text(word)
        return response

    def _default(self, request: WireRequest) -> LLMResponse:
        prepared, model_id = request.prepared, request.spec.id
        tally = self._tallies.of(request.conversation_id, prepared.turns)
        last = prepared.turns[-1] if prepared.turns else None
        if last is None or last.role is not TurnRole.USER:
            return _response([TextBlock(text="How can I help?")], prepared, tally, model_id)
        results = [b for b in last.blocks if isinstance(b, ToolResultBlock)]
        if results:
            said = "; ".join(f"{r.tool_use_id} returned {r.content}" for r in results)
            text = f"The tools answered: {said}."
            return _response([TextBlock(text=text)], prepared, tally, model_id)
        text = " ".join(b.text for b in last.blocks if isinstance(b, TextBlock)).strip()
        turn = tally.answered + 1
        tools = {tool.name: tool for tool in tally.tools(prepared)}
        asked = tool_asked_for(text, tools)
        if asked is not None:
            tool = tools[asked]
            schema = json.loads(tool.schema_json) if tool.schema_json else None
            arguments = json.dumps(arguments_for(schema, text))
            call = ToolUseBlock(id=f"toolu_{turn:04d}_1", name=tool.name, input_json=arguments)
            blocks: list[ContentBlock] = [TextBlock(text=f"Calling {tool.name}."), call]
            return _response(blocks, prepared, tally, model_id, StopReason.TOOL_USE)
        answer = f"Answer {turn}: you said {text!r}."
        return _response([TextBlock(text=answer)], prepared, tally, model_id)


def _words(text: str) -> list[str]:
    """The deltas of ``text``: its words, each after the first with its leading space."""
    first, *rest = text.split(" ")
    return ([first] if first else []) + [" " + word for word in rest]


def scripted_tool_calls(
    *calls: tuple[str, dict[str, Any]], text: str | None = None
) -> Callable[[PreparedConversation], LLMResponse]:
    """A scripted reply that calls tools, each ``(name, arguments)``, after ``text``; ids are
    minted as the default policy does (``toolu_TTTT_N``: the turn, the call's place).

    The reply raises ``ValueError`` when it is sent to a conversation that never announced a
    named tool: a model can only call what it was given.
    """

    def reply(prepared: PreparedConversation) -> LLMResponse:
        announced = {t.name for t in prepared.all_tool_definitions()}
        unknown = [name for name, _ in calls if name not in announced]
        if unknown:
            raise ValueError(
                f"A scripted reply calls {', '.join(unknown)}, which the conversation never "
                f"announced (it has: {', '.join(sorted(announced)) or 'no tools'})."
            )
        tally = _NONE.extended(prepared.turns)
        turn = tally.answered + 1
        blocks: list[ContentBlock] = [TextBlock(text=text)] if text else []
        blocks += [
            ToolUseBlock(id=f"toolu_{turn:04d}_{n}", name=name, input_json=json.dumps(arguments))
            for n, (name, arguments) in enumerate(calls, start=1)
        ]
        return _response(blocks, prepared, tally, SCRIPTED_SPEC.id, StopReason.TOOL_USE)

    return reply


class _Tally:
    """What the default policy reads of a conversation's turns, counted once: the assistant
    turns, the characters of text, and the tools announced in the stream (each at its first
    place, with its last definition). Immutable once built: ``extended`` makes a new one."""

    __slots__ = ("announced", "answered", "chars", "turns")

    def __init__(
        self,
        turns: list[Turn],
        answered: int,
        chars: int,
        announced: dict[str, ToolDefinitionBlock],
    ) -> None:
        self.turns, self.answered, self.chars, self.announced = turns, answered, chars, announced

    def extended(self, turns: Sequence[Turn], whole: list[Turn] | None = None) -> _Tally:
        """This tally with ``turns`` counted after the ones it holds; the new one holds
        ``whole`` (its turns so far, to be remembered) or none. Nothing is copied but the
        map of tools, and only when a definition is added to it."""
        answered, chars, announced = self.answered, self.chars, self.announced
        for turn in turns:
            answered += turn.role is TurnRole.ASSISTANT
            for block in turn.blocks:
                if isinstance(block, TextBlock):
                    chars += len(block.text)
                elif isinstance(block, ToolDefinitionBlock):
                    if announced is self.announced:
                        announced = dict(announced)
                    announced[block.name] = block
        return _Tally(whole if whole is not None else [], answered, chars, announced)

    def tools(self, prepared: PreparedConversation) -> list[ToolDefinitionBlock]:
        """``prepared.all_tool_definitions()``: the head's palette, then the stream's."""
        by_name = {d.name: d for d in prepared.tool_definitions}
        by_name.update(self.announced)
        return list(by_name.values())


_NONE = _Tally([], 0, 0, {})


class _Tallies:
    """Per conversation, the tally of the previous call's settled turns (all but its last,
    which may carry instructions or the registry section), bounded to the ``capacity``
    most recent conversations. A call whose turns start with those counts only the rest,
    so the default policy costs the same on the hundredth turn as on the first.

    Thread-safety: as ``PrefixMonitor``: each conversation's record is written by its
    owner only, and the map is touched by single dict operations.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._records: OrderedDict[str, _Tally] = OrderedDict()

    def of(self, conversation_id: str | None, turns: list[Turn]) -> _Tally:
        """The tally of ``turns``, counting again only what the previous call did not."""
        if conversation_id is None:
            return _NONE.extended(turns)
        previous = self._records.pop(conversation_id, None)
        settled = turns[:-1]  # a fresh list: the new record holds it
        if previous is not None and previous.turns == settled[: len(previous.turns)]:
            base = previous.extended(settled[len(previous.turns) :], settled)  # by identity
        else:
            base = _NONE.extended(settled, settled)
        self._records[conversation_id] = base
        while len(self._records) > self._capacity:
            self._records.popitem(last=False)
        return base.extended(turns[-1:])


def _renamed(spec: ModelSpec, model_id: str) -> ModelSpec:
    return msgspec.structs.replace(spec, id=model_id)


def _response(
    blocks: list[ContentBlock],
    prepared: PreparedConversation,
    tally: _Tally,
    model_id: str,
    stop: StopReason = StopReason.END_TURN,
) -> LLMResponse:
    # a rough usage figure (about four characters a token), cheap on a long conversation
    chars_in = len(prepared.system_text) + tally.chars
    tokens_out = sum(len(b.text) for b in blocks if isinstance(b, TextBlock)) // 4
    return LLMResponse(
        model_id=model_id,
        blocks=blocks,
        stop_reason=stop,
        usage=Usage(input_tokens=chars_in // 4, output_tokens=tokens_out),
    )
