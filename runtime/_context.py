"""ConversationContext: the objective map, the messages, the declared tools, and the render.

Not thread-safe, by design: a context is reached only by its current owner (see
``parlour.actors``). Everything here is plain single-threaded Python.

Every block of every turn and every objective slot goes through the transformation
pipeline (``_pipeline.py``), bound here to this conversation's artifact registry, so the head
and the turns render alike.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from parlour.runtime import _budget
from parlour.runtime._artifacts import ArtifactRegistry
from parlour.runtime._guidance import (
    SCHEMA_NOTATION_GUIDANCE,
    TOOL_ANNOUNCEMENT,
    TOOL_WEIGHT_GUIDANCE,
)
from parlour.runtime._handlers import ContentFormatter, GenericContentFormatter
from parlour.runtime._messages import Message, OutgoingMessage
from parlour.runtime._objective import (
    LEGEND_KEY,
    TOOL_KEY_PREFIX,
    TOOL_WEIGHTS_KEY,
    ObjectiveMap,
)
from parlour.runtime._pipeline import render_slot, to_llm_block
from parlour.runtime._prepared import PreparedConversation, Turn
from parlour.runtime._render import Renderer, Scan
from parlour.runtime._roles import Depth, Grade, Input, OutputSize, TurnRole
from parlour.runtime._serializer import build_registry_section
from parlour.runtime._summarizers import Summarizer, TruncatingSummarizer
from parlour.runtime._tokens import counter_for
from parlour.runtime._validation import check_text
from parlour.runtime.blocks import (
    ContentBlock,
    FileBlock,
    ImageBlock,
    SkillBlock,
    TextBlock,
    ToolDefinitionBlock,
    check_block,
    render_text,
    render_tool_text,
)

if TYPE_CHECKING:
    from parlour.runtime._budget import ModelBinding
    from parlour.runtime._catalog import ModelSpec
    from parlour.runtime._handlers import ResponseHandler
    from parlour.runtime.snapshots import ConversationPersistenceSnapshot

__all__ = [
    "LEGEND_KEY",
    "SCHEMA_NOTATION_GUIDANCE",
    "TOOL_ANNOUNCEMENT",
    "TOOL_KEY_PREFIX",
    "TOOL_WEIGHTS_KEY",
    "TOOL_WEIGHT_GUIDANCE",
    "ConversationContext",
    "DeclaredTool",
    "render_slot",
    "render_tool_text",
    "to_llm_block",
]

UNTITLED = "Untitled Conversation"

_json = msgspec.json.Encoder()
_GENERIC = GenericContentFormatter()
_LEGEND_BLOCK = TextBlock(text=SCHEMA_NOTATION_GUIDANCE)
_TOOL_WEIGHTS_BLOCK = TextBlock(text=TOOL_WEIGHT_GUIDANCE)
_COMPANIONS = ((LEGEND_KEY, SCHEMA_NOTATION_GUIDANCE), (TOOL_WEIGHTS_KEY, TOOL_WEIGHT_GUIDANCE))


class DeclaredTool(Protocol):
    """A tool declared to a conversation; converted to its wire definition lazily, once.

    A ``ToolDefinitionBlock`` is its own DeclaredTool (``definition()`` returns itself).
    """

    @property
    def name(self) -> str: ...

    def definition(self) -> ToolDefinitionBlock: ...


class ConversationContext:
    """One conversation: objective map, messages, declared tools, and the seat's declarations.

    The head (the objective map) freezes at this instance's first render: afterwards an
    identical re-put is silent and any other change is a logged no-op, so the cached prompt
    prefix never moves. The freeze is never persisted.

    Thread-safety: none; only the conversation's current owner touches it.
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
        # the seat's declarations: readable before any resolution, None until set
        self.grade: Grade | None = None
        self.depth: Depth | None = None
        self.output_declaration: OutputSize | int | None = None
        self.interactive = False
        self.prior_spec_id: str | None = None
        # The fencing version of the stored record this context was loaded at or last saved
        # as; 0 while no durable record exists. Set by whoever persists it, never by users.
        self.stored_version = 0
        self.artifact_registry = ArtifactRegistry()
        self.summarizer: Summarizer = TruncatingSummarizer()
        self._objective = ObjectiveMap(self._render_slot)
        self._declared: dict[str, DeclaredTool] = {}
        self._skills: dict[str, SkillBlock] = {}

    @property
    def stored(self) -> bool:
        """A durable record of this conversation exists (it was loaded or saved)."""
        return self.stored_version > 0

    # -- the objective map ------------------------------------------------------------------

    def put_main_objective(self, key: str, value: object) -> None:
        """Put ``value`` in slot ``key``; a re-put keeps the slot's position.

        Text is stored as a TextBlock, a block as itself, any other value (a msgspec Struct,
        a dataclass, a dict) as a PojoBlock rendered through the pipeline. None or "" creates
        no slot. After the first render a put that renders identically is silent, and
        anything else is logged at error level with a stack trace and ignored.

        Raises:
            ValueError: the value could not be stored: a lone surrogate in any text, nesting
                deeper than ``MAX_NESTING``, or a value msgspec cannot encode. The message
                names the slot; the objective is left as it was.
        """
        self._objective.put(key, value)

    def nuke_main_objective(self) -> None:
        """Empty the whole objective, framework slots included; nothing re-seeds itself.

        After the first render it is a logged no-op.
        """
        self._objective.nuke()

    def get_main_objective(self) -> dict[str, ContentBlock]:
        """An ordered copy of the objective map: slot keys to their blocks."""
        return self._objective.copy()

    def has_main_objective(self, key: str) -> bool:
        return key in self._objective

    def set_cache_main_objective(self, cache: bool) -> None:
        """Whether the system content is marked cacheable: ``cache_system``."""
        self.cache_main_objective = cache

    def set_compactable(self, compactable: bool) -> None:
        self.compactable = compactable

    def is_compactable(self) -> bool:
        return self.compactable

    # -- messages ---------------------------------------------------------------------------

    def add_message(self, message: Message) -> None:
        """Append ``message``; it validated its own text and blocks as they entered it.

        Raises:
            ValueError: ``message`` is not a ``Message``.
        """
        if not isinstance(message, Message):
            raise ValueError(
                f"Conversation {self.conversation_id} accepts Message instances, "
                f"not {type(message).__name__}; refused"
            )
        self.messages.append(message)

    def add_user_message(self, text: str, **flags: Any) -> OutgoingMessage:
        """Append a user message saying ``text``.

        Raises:
            ValueError: ``text`` holds a lone surrogate (the message names where).
        """
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

    def carried_inputs(self) -> set[Input]:
        """The inputs beyond text the outgoing messages carry anywhere in the history: an
        image as ``Input.IMAGES``, a file as ``Input.DOCUMENTS``."""
        carried: set[Input] = set()
        for m in self.messages:
            if isinstance(m, OutgoingMessage):
                for b in m.blocks:
                    if isinstance(b, ImageBlock):
                        carried.add(Input.IMAGES)
                    elif isinstance(b, FileBlock):
                        carried.add(Input.DOCUMENTS)
        return carried

    # -- skills -----------------------------------------------------------------------------

    def admit_skill(self, skill: SkillBlock) -> None:
        """Admit a skill, once per name. Before the first render it joins the system
        content ahead of the objective; after the freeze it arrives as an app-authored
        user message, so the cached prefix never moves.

        Raises:
            ValueError: ``skill`` is not a SkillBlock that could be stored (a lone surrogate,
                a field of the wrong type); the message names the skill.
        """
        if not isinstance(skill, SkillBlock):
            raise ValueError(f"A skill is a SkillBlock, not {type(skill).__name__}; refused")
        check_block(skill, f"skill {skill.name!r}")
        if skill.name in self._skills:
            return
        self._skills[skill.name] = skill
        if self._objective.frozen:
            self.messages.append(OutgoingMessage(blocks=[skill], app_authored=True))

    def admitted_skills(self) -> list[SkillBlock]:
        """Every admitted skill, in admission order."""
        return list(self._skills.values())

    def _head_skills(self) -> list[SkillBlock]:
        """Admitted skills not already said in the stream (those admitted after a freeze)."""
        if not self._skills:
            return []
        streamed = {
            b.name
            for m in self.messages
            if m.app_authored
            for b in m.blocks
            if isinstance(b, SkillBlock)
        }
        return [s for name, s in self._skills.items() if name not in streamed]

    # -- tools ------------------------------------------------------------------------------

    def add_tool(self, tool: DeclaredTool) -> None:
        """Declare a tool; add-only, so a name already declared is a no-op.

        Nothing converts here: the definition is taken at the first render after this call
        (and validated then, like a definition given here).

        Raises:
            ValueError: the tool's name, or the definition given, could not be stored (a
                lone surrogate, a field of the wrong type); the message names the tool.
        """
        if isinstance(tool, ToolDefinitionBlock):
            check_block(tool, f"tool definition {tool.name!r}")
        else:
            check_text(tool.name, "a declared tool's name")
        self._declared.setdefault(tool.name, tool)

    def add_tools(self, tools: Iterable[DeclaredTool]) -> None:
        for tool in tools:
            self.add_tool(tool)

    def declared_tools(self) -> dict[str, DeclaredTool]:
        """The declarations by name, in declaration order (converted or not)."""
        return dict(self._declared)

    def declared_tool_definitions(self) -> list[ToolDefinitionBlock]:
        """Every declaration as its wire definition, converting the unconverted ones (once)."""
        return [self._definition(name) for name in self._declared]

    def announced_tools(self) -> dict[str, ToolDefinitionBlock]:
        """Tools the model has been shown, derived from the content itself: the head's
        palette, then definitions announced in outgoing messages, a later one winning."""
        announced = dict(self._objective.head_tools())
        for m in self.messages:
            if isinstance(m, OutgoingMessage):
                for b in m.blocks:
                    if isinstance(b, ToolDefinitionBlock):
                        announced[b.name] = b
        return announced

    def _definition(self, name: str) -> ToolDefinitionBlock:
        # a definition is its own DeclaredTool: storing what the declaration produced makes
        # this the one and only conversion
        declared = self._declared[name]
        definition = declared.definition()
        if definition is not declared:
            check_block(definition, f"tool definition {name!r}")
        self._declared[name] = definition
        return definition

    # -- rendering --------------------------------------------------------------------------

    def prepare_messages_for_llm(
        self,
        formatter: ContentFormatter | None = None,
        thinking_active: bool = False,
    ) -> PreparedConversation:
        """Render: reconcile the legend and the declared tools, freeze the head, and map the
        messages to turns (the channel contract).

        The objective comes back as ``system_text``, the only system content; each message
        becomes one USER or ASSISTANT turn; response instructions ride the asking turn. The
        stored messages are never rewritten; the legend and late tools may be appended as
        app-authored messages once the head is frozen.

        Raises:
            UncorrectableLLMError: a message has a role other than user or assistant; it is
                never relabelled.
        """
        native = (formatter or _GENERIC).supports_native_tool_calling()
        # to_llm_block is the pipeline seam: every block of every turn goes through it
        renderer = Renderer(self._to_llm_block, native, thinking_active, self._companions_to_find())
        scan = renderer.walk(self.messages)
        if self._objective.frozen:
            self._reconcile_stream(scan, renderer)
        else:
            self._reconcile_head(scan)
            self._objective.freeze()
        system_text = self._objective.system_text(native)
        section = build_registry_section(self.artifact_registry, self.summarizer)
        turns = scan.turns
        if section:  # data, not instruction: a trailing user turn, never cached
            turns = [*turns, Turn(role=TurnRole.USER, blocks=[TextBlock(text=section)])]
        return PreparedConversation(
            system_text=system_text,
            turns=turns,
            cache_system=self.cache_main_objective,
            tool_definitions=self._objective.tool_definitions(),
            skills=self._head_skills(),
        )

    def _pending(self, stream_announced: dict[str, ToolDefinitionBlock]) -> list[str]:
        head = self._objective.head_tools()
        return [n for n in self._declared if n not in head and n not in stream_announced]

    def _reconcile_head(self, scan: Scan) -> None:
        """First render: the companions and the pending palette join the head, framework
        slots re-put in place so a restored conversation self-heals."""
        if scan.uses_notation:
            self._objective.place(LEGEND_KEY, _LEGEND_BLOCK)
        pending = [self._definition(n) for n in self._pending(scan.announced)]
        if pending or self._objective.has_tool_slots():
            self._objective.place(
                TOOL_WEIGHTS_KEY, _TOOL_WEIGHTS_BLOCK, before_prefix=TOOL_KEY_PREFIX
            )
        for tool in pending:
            self._objective.place(TOOL_KEY_PREFIX + tool.name, tool)

    def _companions_to_find(self) -> tuple[str, ...]:
        # only a frozen head that lacks a companion needs to look for it in the stream
        head = self._objective
        if not head.frozen or (LEGEND_KEY in head and TOOL_WEIGHTS_KEY in head):
            return ()
        return tuple(text for key, text in _COMPANIONS if key not in head)

    def _reconcile_stream(self, scan: Scan, renderer: Renderer) -> None:
        """A frozen head: a companion or a tool that first appears now arrives as one
        app-authored user message at the end of the stream."""
        said = scan.companions
        legend_missing = LEGEND_KEY not in self._objective and SCHEMA_NOTATION_GUIDANCE not in said
        if scan.uses_notation and legend_missing:
            self._append(scan, renderer, [_LEGEND_BLOCK])
        pending = [self._definition(n) for n in self._pending(scan.announced)]
        if not pending:
            return
        blocks: list[ContentBlock] = [TextBlock(text=TOOL_ANNOUNCEMENT)]
        if TOOL_WEIGHTS_KEY not in self._objective and TOOL_WEIGHT_GUIDANCE not in said:
            blocks.append(_TOOL_WEIGHTS_BLOCK)
        self._append(scan, renderer, [*blocks, *pending])

    def _append(self, scan: Scan, renderer: Renderer, blocks: list[ContentBlock]) -> None:
        message = OutgoingMessage(blocks=blocks, app_authored=True)
        self.messages.append(message)
        scan.turns.append(renderer.turn(message))

    # -- the pipeline, bound to this conversation's registry ----------------------------------

    def _to_llm_block(self, block: ContentBlock) -> ContentBlock:
        return to_llm_block(block, self.artifact_registry, self.summarizer)

    def _render_slot(self, block: ContentBlock) -> str:
        return render_slot(block, self.artifact_registry, self.summarizer)

    # -- tokens -----------------------------------------------------------------------------

    def get_total_tokens(self, spec: object) -> int:
        """A fresh estimate of the whole conversation's input tokens.

        The objective and the registry are counted on the strings a render would send;
        messages on their raw content plus fixed per-image and per-file costs; the response
        instructions are not counted. ``spec.encoding`` (if any) names the tokenizer.

        Raises:
            ValueError: ``spec`` is None.
        """
        if spec is None:
            raise ValueError("get_total_tokens needs the model spec whose tokenizer counts")
        counter = counter_for(getattr(spec, "encoding", None))
        system_text = "\n\n".join(
            [
                *(render_text(skill) for skill in self._skills.values()),
                self._objective.system_text(False),
            ]
        )

        def render(block: ContentBlock) -> str:
            if isinstance(block, ToolDefinitionBlock):
                return render_tool_text(block)
            return self._render_slot(block)

        messages = sum(counter.count_message(m, render) for m in self.messages)
        section = build_registry_section(self.artifact_registry, self.summarizer)
        return counter.count(system_text) + messages + counter.count(section)

    # -- persistence ------------------------------------------------------------------------

    def to_snapshot(self) -> ConversationPersistenceSnapshot:
        """This conversation as plain data; the freeze and any binding are not part of it."""
        from parlour.runtime.snapshots import ConversationPersistenceSnapshot

        return ConversationPersistenceSnapshot.of(self)

    @staticmethod
    def from_snapshot(
        snapshot: ConversationPersistenceSnapshot, handler: ResponseHandler | None = None
    ) -> ConversationContext:
        """A fresh, unfrozen, unbound context from ``snapshot``."""
        return snapshot.to_conversation(handler)

    def is_frozen(self) -> bool:
        """True once this instance has rendered; never persisted."""
        return self._objective.frozen

    # -- the model binding and output budgets (delegates to _budget) -------------------------

    model_binding: ModelBinding | None = None  # live, never persisted

    def set_model_binding(self, binding: ModelBinding) -> None:
        """Attach ``binding`` and wire it back to this conversation."""
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
