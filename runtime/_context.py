"""ConversationContext: the objective map, the messages, the declared tools, and the render.

Not thread-safe, by design: a context is reached only by its current owner (see
``parlour.actors``). Everything here is plain single-threaded Python.
"""

from __future__ import annotations

import datetime as dt
import traceback
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
from loguru import logger

from parlour.runtime import _budget
from parlour.runtime._handlers import ContentFormatter, GenericContentFormatter
from parlour.runtime._messages import IncomingMessage, Message, OutgoingMessage
from parlour.runtime._prepared import PreparedConversation, Turn
from parlour.runtime._roles import Depth, Grade, OutputSize, TurnRole
from parlour.runtime.blocks import (
    ContentBlock,
    JsonBlock,
    PojoBlock,
    TextBlock,
    ToolDefinitionBlock,
)
from parlour.runtime.errors import IllegalStateError

if TYPE_CHECKING:
    from parlour.runtime._budget import ModelBinding
    from parlour.runtime._catalog import ModelSpec
    from parlour.runtime._handlers import ResponseHandler
    from parlour.runtime.snapshots import ConversationPersistenceSnapshot

SCHEMA_NOTATION_GUIDANCE = (
    "Schemas in this conversation use a compact notation: keys beginning with @ describe a "
    "field rather than hold data. @type is the field's type, @description says what it is, "
    "@required marks a field that must be present, @examples lists sample values, @values "
    "lists the only allowed values of an enum, and @fields holds the fields of a nested object."
)
TOOL_WEIGHT_GUIDANCE = (
    "Available tools:\n"
    "Each tool below may carry a [type, weight: N] annotation: the type says what kind of work "
    "the tool does and the weight how costly a call is. Prefer lighter tools when they serve."
)
TOOL_ANNOUNCEMENT = "Additional tools now available:"
LEGEND_KEY = "legend"
TOOL_WEIGHTS_KEY = "toolWeights"
TOOL_KEY_PREFIX = "tool:"
UNTITLED = "Untitled Conversation"

_json = msgspec.json.Encoder()


class DeclaredTool(Protocol):
    """A tool declared to a conversation; converted to its wire definition lazily, once."""

    @property
    def name(self) -> str: ...

    def definition(self) -> ToolDefinitionBlock: ...


def render_tool_text(tool: ToolDefinitionBlock) -> str:
    """The text form of a tool definition, as the text dialect sends it (B14)."""
    if tool.schema_json is None:
        return f"{tool.name}: {tool.description}"
    return f"{tool.name}: {tool.description}\n  Input parameters: {tool.schema_json}"


def to_llm_block(block: ContentBlock) -> ContentBlock:
    """The transformation pipeline for one block: a PojoBlock becomes a JsonBlock."""
    if isinstance(block, PojoBlock):
        return JsonBlock(json=_json.encode(block.value).decode())
    return block


def render_slot(value: object) -> str:
    """The text an objective slot contributes to ``system_text``."""
    if isinstance(value, str):
        return value
    if isinstance(value, TextBlock):
        return value.text
    if isinstance(value, ToolDefinitionBlock):
        return render_tool_text(value)
    if isinstance(value, JsonBlock):
        return value.json
    if isinstance(value, PojoBlock):
        value = value.value
    return _json.encode(value).decode()


class ConversationContext:
    """One conversation: objective map, messages, declared tools, and the seat's declarations.

    The head (the objective map) freezes at this instance's first render: afterwards an
    identical re-put is silent and any other change is a logged no-op, so the cached prompt
    prefix never moves. The freeze is never persisted.
    """

    def __init__(
        self,
        conversation_id: str | None = None,
        *,
        user_id: str | None = None,
        workflow_id: str | None = None,
        temporary: bool = False,
        created_at: dt.datetime | None = None,
    ) -> None:
        self.conversation_id = conversation_id
        self.user_id = user_id
        self.workflow_id = workflow_id
        self.temporary = temporary
        self.created_at = created_at or dt.datetime.now(dt.UTC)
        self.messages: list[Message] = []
        self.compactable = True
        self.cache_main_objective = True
        self.grade: Grade | None = None
        self.depth: Depth | None = None
        self.output_declaration: OutputSize | int | None = None
        self.interactive = False
        self.prior_spec_id: str | None = None
        self.stored = False  # a durable record exists (set by the service, never persisted)
        self._objective: dict[str, object] = {}
        self._declared: dict[str, DeclaredTool] = {}
        self._frozen = False

    # -- the objective map ------------------------------------------------------------------

    def put_main_objective(self, key: str, value: object) -> None:
        """Put ``value`` in slot ``key``; a re-put keeps the slot's position.

        Empty or None values create no slot. After the first render, a put that renders
        identically is silent and anything else is logged at error level and ignored.
        """
        if value is None or value == "":
            return
        if self._frozen:
            current = self._objective.get(key)
            if current is not None and render_slot(current) == render_slot(value):
                return
            _loud_noop(f'put_main_objective("{key}")')
            return
        self._objective[key] = value

    def nuke_main_objective(self) -> None:
        """Empty the whole objective, framework slots included; nothing re-seeds itself."""
        if self._frozen:
            _loud_noop("nuke_main_objective()")
            return
        self._objective.clear()

    def get_main_objective(self) -> dict[str, object]:
        """An ordered copy of the objective map."""
        return dict(self._objective)

    def has_main_objective(self, key: str) -> bool:
        return key in self._objective

    def set_cache_main_objective(self, cache: bool) -> None:
        self.cache_main_objective = cache

    def set_compactable(self, compactable: bool) -> None:
        self.compactable = compactable

    def is_compactable(self) -> bool:
        return self.compactable

    # -- messages ---------------------------------------------------------------------------

    def add_message(self, message: Message) -> None:
        self.messages.append(message)

    def add_user_message(self, text: str, **flags: Any) -> OutgoingMessage:
        message = OutgoingMessage(text, [TextBlock(text=text)], **flags)
        self.messages.append(message)
        return message

    def first_user_utterance(self) -> str | None:
        """The first message a human sent: user-role, not app-authored."""
        for m in self.messages:
            if m.role == "user" and not m.app_authored:
                text = m.raw_content
                if text.strip():
                    return text
        return None

    @property
    def title(self) -> str:
        """The first utterance, cut at 50 characters, or "Untitled Conversation"."""
        utterance = self.first_user_utterance()
        if utterance is None:
            return UNTITLED
        return utterance if len(utterance) <= 50 else utterance[:50] + "..."

    # -- tools ------------------------------------------------------------------------------

    def add_tool(self, tool: DeclaredTool) -> None:
        """Declare a tool; add-only, so a name already declared is a no-op."""
        self._declared.setdefault(tool.name, tool)

    def add_tools(self, tools: Iterable[DeclaredTool]) -> None:
        for tool in tools:
            self.add_tool(tool)

    def declared_tools(self) -> dict[str, DeclaredTool]:
        return dict(self._declared)

    def announced_tools(self) -> dict[str, ToolDefinitionBlock]:
        """Tools the model has been shown, derived from the content itself."""
        announced: dict[str, ToolDefinitionBlock] = {}
        for key, value in self._objective.items():
            if key.startswith(TOOL_KEY_PREFIX) and isinstance(value, ToolDefinitionBlock):
                announced[value.name] = value
        for m in self.messages:
            for b in m.blocks:
                if isinstance(b, ToolDefinitionBlock):
                    announced[b.name] = b
        return announced

    def pending_tools(self) -> list[DeclaredTool]:
        """Declared tools not yet announced to the model."""
        announced = self.announced_tools()
        return [t for name, t in self._declared.items() if name not in announced]

    # -- rendering --------------------------------------------------------------------------

    def prepare_messages_for_llm(
        self,
        formatter: ContentFormatter | None = None,
        thinking_active: bool = False,
    ) -> PreparedConversation:
        """Render: reconcile tools and legend, freeze the head, map messages to turns.

        Raises:
            UncorrectableLLMError: a message has a role other than user or assistant.
        """
        formatter = formatter or GenericContentFormatter()
        self._reconcile()
        self._frozen = True
        native = formatter.supports_native_tool_calling()
        system_text = "\n\n".join(
            render_slot(v)
            for k, v in self._objective.items()
            if not (native and k.startswith(TOOL_KEY_PREFIX))  # native tools travel typed
        )
        turns = [self._turn(m) for m in self.messages]
        self._append_instructions(turns, formatter, thinking_active)
        head_tools = [
            v
            for k, v in self._objective.items()
            if k.startswith(TOOL_KEY_PREFIX) and isinstance(v, ToolDefinitionBlock)
        ]
        return PreparedConversation(
            system_text=system_text,
            turns=turns,
            cache_system=self.cache_main_objective,
            tool_definitions=head_tools,
        )

    def _turn(self, message: Message) -> Turn:
        role = TurnRole.of(message.role)
        if message.blocks:
            blocks = [to_llm_block(b) for b in message.blocks]
        else:
            blocks = [TextBlock(text=message.raw_content)]
        return Turn(role=role, blocks=blocks, cache=message.cache)

    def _append_instructions(
        self, turns: list[Turn], formatter: ContentFormatter, thinking_active: bool
    ) -> None:
        last = self.messages[-1] if self.messages else None
        if not isinstance(last, OutgoingMessage) or last.response_handler is None:
            return
        text = last.response_handler.response_instructions(
            formatter.supports_native_tool_calling(), thinking_active
        )
        if text:
            turns[-1] = Turn(
                role=turns[-1].role,
                blocks=[*turns[-1].blocks, TextBlock(text=text)],
                cache=turns[-1].cache,
            )

    def _uses_schema_notation(self) -> bool:
        return any(
            isinstance(m, OutgoingMessage)
            and m.response_handler is not None
            and m.response_handler.uses_schema_notation()
            for m in self.messages
        )

    def _reconcile(self) -> None:
        """Place the framework companions and pending tools: in the head before the freeze,
        as stream messages after it."""
        pending = [t.definition() for t in self.pending_tools()]
        needs_legend = self._uses_schema_notation()
        if not self._frozen:
            if needs_legend:
                self._objective[LEGEND_KEY] = SCHEMA_NOTATION_GUIDANCE
            has_head_tools = any(k.startswith(TOOL_KEY_PREFIX) for k in self._objective)
            if pending or has_head_tools:
                self._objective[TOOL_WEIGHTS_KEY] = TOOL_WEIGHT_GUIDANCE
            for tool in pending:
                self._objective[TOOL_KEY_PREFIX + tool.name] = tool
            return
        if needs_legend and not self._legend_shown():
            self.messages.append(
                OutgoingMessage(SCHEMA_NOTATION_GUIDANCE, app_authored=True)
            )
        if pending:
            announcement = OutgoingMessage(
                TOOL_ANNOUNCEMENT, [TextBlock(text=TOOL_ANNOUNCEMENT), *pending],
                app_authored=True,
            )
            self.messages.append(announcement)

    def _legend_shown(self) -> bool:
        if LEGEND_KEY in self._objective:
            return True
        return any(
            m.app_authored and m.raw_content == SCHEMA_NOTATION_GUIDANCE for m in self.messages
        )

    # -- persistence ------------------------------------------------------------------------

    def to_snapshot(self) -> ConversationPersistenceSnapshot:
        """This conversation as plain data; the freeze and any binding are not part of it."""
        from parlour.runtime.snapshots import ConversationPersistenceSnapshot  # noqa: PLC0415

        return ConversationPersistenceSnapshot.of(self)

    @staticmethod
    def from_snapshot(
        snapshot: ConversationPersistenceSnapshot, handler: ResponseHandler | None = None
    ) -> ConversationContext:
        """A fresh, unfrozen, unbound context from ``snapshot``."""
        return snapshot.to_conversation(handler)

    def is_frozen(self) -> bool:
        """True once this instance has rendered; never persisted."""
        return self._frozen

    # -- the model binding and output budgets (delegates to _budget) -------------------------

    model_binding: ModelBinding | None = None  # live, never persisted

    def set_model_binding(self, binding: ModelBinding) -> None:
        """Attach ``binding`` and wire it back to this conversation (B149)."""
        self.model_binding = binding
        binding.conversation = self

    def get_model(self) -> ModelSpec:
        """The resolved spec. Raises UncorrectableLLMError while unresolved."""
        return _budget.get_model(self)

    def is_model_resolved(self) -> bool:
        return _budget.is_model_resolved(self)

    def served_spec_id(self) -> str | None:
        """The bound spec's id, else ``prior_spec_id``: what a snapshot records."""
        return _budget.served_spec_id(self)

    def resolve_output_budget(self) -> int:
        """The next call's output tokens; see ``_budget.resolve_output_budget``."""
        return _budget.resolve_output_budget(self)

    def resolve_depth(self) -> Depth:
        return _budget.resolve_depth(self)

    def output_reserve(self, spec: ModelSpec) -> int:
        """Output budget plus booked reasoning on ``spec``, clamped at its ceiling."""
        return _budget.output_reserve(self, spec)

    @staticmethod
    def single_turn(spec: ModelSpec, prompt: str, backstop_tokens: int) -> ConversationContext:
        """A fresh bound one-turn conversation at IMMEDIATE, capped at the backstop."""
        return _budget.single_turn(spec, prompt, backstop_tokens)


def _loud_noop(attempt: str) -> None:
    logger.error(
        "{} ignored: the head is frozen after the first render, and changing it would "
        "invalidate the cached prefix. Send mid-conversation instructions as a message.",
        attempt,
    )
    stack = "".join(traceback.format_stack(limit=12)[:-1])
    logger.opt(exception=IllegalStateError(f"{attempt} after the freeze")).error(
        "{} refused after the freeze; called from:\n{}", attempt, stack
    )
