"""ConversationContext: the objective map, the messages, the declared tools, the render,
and the conversation's stored form, ``ConversationPersistenceSnapshot``.

Why this module is long: the conversation and its stored form name each other (a context
turns itself into a snapshot, a snapshot restores into a context), and only one module can
hold both without an import circle; the codec of the stored form is ``snapshots.py``.

Not thread-safe, by design: a context is reached only by its current owner (see
``parlour.actors``). Everything here is plain single-threaded Python.

Every block of every turn and every objective slot goes through the transformation
pipeline (``_render.py``), bound here to this conversation's artifact registry, so the head
and the turns render alike. The palette (``_palette.py``) holds the declared tools and
skills, reconciliation (``_reconcile.py``) what a render adds; the model binding
(``models._budget``) answers the output budgets from this conversation's declarations.
"""

from __future__ import annotations

import datetime as dt
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import msgspec

from . import _utterances
from ._appended import Appended, SavedMark, changes_since, mark
from ._handlers import ContentFormatter, GenericContentFormatter, ResponseHandler
from ._message_snapshot import MessageSnapshot, message_snapshots, repaired_messages
from ._messages import Message, OutgoingMessage
from ._objective import ObjectiveMap, ObjectiveSlot
from ._open_turn import OpenTurn
from ._palette import DeclaredTool, Palette
from ._prepared import PreparedConversation, Turn
from ._reconcile import companions_to_find, reconcile_head, stream_additions
from ._render import Renderer, Scan, render_slot, to_llm_block
from ._roles import Depth, Grade, Input, OutputSize, TurnRole
from ._settled import Ledger, Messages, Settled, as_messages, copy_entries
from .artifacts._registry import ArtifactRegistry
from .artifacts._serializer import build_registry_section, registry_entries, restore_registry
from .artifacts._summarizers import Summarizer, TruncatingSummarizer
from .blocks import (
    ContentBlock,
    SkillBlock,
    TextBlock,
    ToolDefinitionBlock,
    render_text,
    render_tool_text,
    revive,
)
from .models._budget import ModelBinding
from .models._tokens import BoundMemo, spec_counter, utf8_bound

if TYPE_CHECKING:
    from .models._spec import ModelSpec

__all__ = ["FORMAT_VERSION", "ConversationContext", "ConversationPersistenceSnapshot"]

# The newest snapshot format this code writes; decoding a newer one is refused (snapshots).
FORMAT_VERSION = 1

UNTITLED = "Untitled Conversation"

_GENERIC = GenericContentFormatter()
_TRUNCATING = TruncatingSummarizer()


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
        self._messages = Messages()
        self.compactable = True
        self.cache_main_objective = True
        # the seat's declarations: readable before any resolution, None until set
        self.grade: Grade | None = None
        self.depth: Depth | None = None
        self.output_declaration: OutputSize | int | None = None
        self.interactive = False
        self.prior_spec_id: str | None = None
        # the stored record's fencing version at load or last save (0: none); set by persisters
        self.stored_version = 0
        # the agent's open-turn record, saved with each boundary (``OpenTurn``); None: none
        self.open_turn: OpenTurn | None = None
        self.artifact_registry = ArtifactRegistry()
        # What each model call and compaction cost, kept beside the conversation and
        # persisted with it: never rendered, never part of the conversation's token count.
        self.usage_ledger: list[dict[str, Any]] = Ledger()  # its copies share by origin
        self.summarizer: Summarizer = _TRUNCATING  # stateless: one for every conversation
        # held weakly: no cycle, so a context is freed by reference counting alone
        self._objective = ObjectiveMap(ConversationContext._render_slot, weakref.ref(self))
        self._palette = Palette()
        self._settled_turns: Settled[Turn | None] = Settled()
        self._settled_snapshots: Settled[MessageSnapshot] = Settled()
        self._bounds = BoundMemo()  # the leading messages' bound, kept for the next check

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

    @property
    def messages(self) -> Messages:
        """The messages, in order. Assigning an iterable of messages replaces them."""
        return self._messages

    @messages.setter
    def messages(self, messages: Iterable[Message]) -> None:
        self._messages = as_messages(messages)  # a list that notes its changes

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
        self._messages.append(message)

    def add_user_message(self, text: str, **flags: Any) -> OutgoingMessage:
        """Append a user message saying ``text``.

        Raises:
            ValueError: ``text`` holds a lone surrogate (the message names where).
        """
        self._messages.append(message := OutgoingMessage(text, [TextBlock(text=text)], **flags))
        return message

    def first_user_utterance(self) -> str | None:
        """The first message a human sent: user-role, not app-authored."""
        return _utterances.first_user_utterance(self._messages)

    @property
    def title(self) -> str:
        """The first utterance, cut at 50 characters, or "Untitled Conversation"."""
        return _utterances.title_of(self._messages, UNTITLED)

    def carried_inputs(self) -> set[Input]:
        """What outgoing messages carry anywhere: ``Input.IMAGES``, ``Input.DOCUMENTS``."""
        return _utterances.carried_inputs(self._messages)

    # -- skills -----------------------------------------------------------------------------

    def admit_skill(self, skill: SkillBlock) -> None:
        """Admit a skill, once per name. Before the first render it joins the system
        content ahead of the objective; after the freeze it arrives as an app-authored
        user message, so the cached prefix never moves.

        Raises:
            ValueError: ``skill`` is not a SkillBlock that could be stored (a lone surrogate,
                a field of the wrong type); the message names the skill.
        """
        if self._palette.admit(skill) and self._objective.frozen:
            self._messages.append(OutgoingMessage(blocks=[skill], app_authored=True))

    def admitted_skills(self) -> list[SkillBlock]:
        """Every admitted skill, in admission order."""
        return self._palette.skills()

    # -- tools ------------------------------------------------------------------------------

    def add_tool(self, tool: DeclaredTool) -> None:
        """Declare a tool; add-only, so a name already declared is a no-op.

        Nothing converts here: the definition is taken at the first render after this call
        (and validated then, like a definition given here).

        Raises:
            ValueError: the tool's name, or the definition given, could not be stored (a
                lone surrogate, a field of the wrong type); the message names the tool.
        """
        self._palette.declare(tool)

    def add_tools(self, tools: Iterable[DeclaredTool]) -> None:
        for tool in tools:
            self.add_tool(tool)

    def declared_tools(self) -> dict[str, DeclaredTool]:
        """The declarations by name, in declaration order (converted or not)."""
        return self._palette.tools()

    def declared_tool_definitions(self) -> list[ToolDefinitionBlock]:
        """Every declaration as its wire definition, converting the unconverted ones (once)."""
        return self._palette.definitions()

    def announced_tools(self) -> dict[str, ToolDefinitionBlock]:
        """Tools the model has been shown, derived from the content itself: the head's
        palette, then definitions announced in outgoing messages, a later one winning."""
        announced = dict(self._objective.head_tools())
        for b in _utterances.outgoing_blocks(self._messages):
            if isinstance(b, ToolDefinitionBlock):
                announced[b.name] = b
        return announced

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
        head = self._objective
        renderer = Renderer(self._to_llm_block, native, thinking_active, companions_to_find(head))
        scan = renderer.walk(self._messages, self._settled_turns)
        pending = self._palette.pending(head.head_tools(), scan.announced)
        if head.frozen:
            if scan.uses_notation or pending:  # only then may a companion be missing
                renderer.note_companions(self._messages)
            for blocks in stream_additions(head, scan, pending):
                self._append(scan, renderer, blocks)
        else:
            reconcile_head(head, scan, pending)
            head.freeze()
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
            skills=self._palette.unsaid_skills(self._messages),
        )

    def _append(self, scan: Scan, renderer: Renderer, blocks: list[ContentBlock]) -> None:
        self._messages.append(message := OutgoingMessage(blocks=blocks, app_authored=True))
        scan.turns.append(renderer.turn(message))

    # -- the pipeline, bound to this conversation's registry ----------------------------------

    def _to_llm_block(self, block: ContentBlock) -> ContentBlock:
        return to_llm_block(block, self.artifact_registry, self.summarizer)

    def _render_slot(self, block: ContentBlock) -> str:
        return render_slot(block, self.artifact_registry, self.summarizer)

    # -- tokens -----------------------------------------------------------------------------

    def get_total_tokens(self, spec: object) -> int:
        """A fresh estimate of the whole conversation's input tokens: the objective and the
        registry as a render sends them, messages on their raw content plus fixed per-image
        and per-file costs, never the response instructions; ``spec.encoding`` (if any) names
        the tokenizer. A warm count encodes only what is new. ``ValueError``: no ``spec``."""
        c = spec_counter(spec)
        return self._tally(c.count, c.count_messages(self._messages, self._weighed, self._bounds))

    def get_token_bound(self, spec: object) -> int:
        """At least ``get_total_tokens(spec)``, encoding nothing: each message's memoized
        count, else its UTF-8 length, summed anew only past ``models._bounds``'s kept sum."""
        c = spec_counter(spec)
        bound = c.bound_messages(self._messages, self._weighed, self._bounds)
        return self._tally(utf8_bound, bound)

    def _tally(self, count: Callable[[str], int], messages: int) -> int:
        system_text = self._objective.system_text(False)
        if skills := self._palette.skills():  # joined only when there are any
            system_text = "\n\n".join([*map(render_text, skills), system_text])
        section = build_registry_section(self.artifact_registry, self.summarizer)
        return count(system_text) + messages + count(section)

    def _weighed(self, block: ContentBlock) -> str:
        if isinstance(block, ToolDefinitionBlock):
            return render_tool_text(block)
        return self._render_slot(block)

    # -- persistence ------------------------------------------------------------------------

    _saved_mark: SavedMark | None = None  # the last durable save's (``_appended``)

    def changes_since_save(self) -> Appended | None:
        """What this conversation added since its last durable save (``mark_saved``), when
        adding messages, usage entries and moving the open-turn record is all it did; None
        when anything else changed, or no save was marked."""
        return changes_since(self)

    def mark_saved(
        self,
        version: int,
        snapshots: list[MessageSnapshot] | None = None,
        appended: Appended | None = None,
    ) -> None:
        """Note a durable save of this conversation as ``version``: of a whole snapshot
        whose messages were ``snapshots``, or of ``appended`` (made by
        ``changes_since_save`` since the last mark). Persisters call it after each save."""
        mark(self, version, snapshots, appended)

    def unmark_saved(self) -> None:
        """Forget the last save's mark (a save failed: what is stored is not known here)."""
        self._saved_mark = None

    def _body_scalars(self) -> tuple[object, ...]:
        """The snapshot's scalar fields but the title, as the very objects they are."""
        binding = self.model_binding
        spec = None if binding is None else binding.spec
        return (
            self.conversation_id,
            self.user_id,
            self.workflow_id,
            self.created_at,
            self.grade,
            self.depth,
            self.output_declaration,
            self.interactive,
            self.compactable,
            self.temporary,
            self.cache_main_objective,
            self.prior_spec_id if spec is None else spec.id,
        )

    def _body_counters(self) -> tuple[int, int]:
        return self._objective.changes, self._palette.changes

    def _body_markable(self) -> bool:
        """Whether the body can only change through this conversation (no artifact and no
        ``PojoBlock`` slot, whose values may change in place)."""
        return not len(self.artifact_registry) and not self._objective.holds_pojo()

    def to_snapshot(self) -> ConversationPersistenceSnapshot:
        """This conversation as plain data; the freeze and any binding are not part of it
        (the bound spec's id is recorded as ``prior_spec_id``, else the prior one carried on)."""
        binding = self.model_binding
        spec = None if binding is None else binding.spec
        return ConversationPersistenceSnapshot(
            conversation_id=self.conversation_id,
            user_id=self.user_id,
            workflow_id=self.workflow_id,
            title=self.title,
            created_at=self.created_at,
            objective=self._objective.stored(),
            declared_tools=self.declared_tool_definitions(),
            messages=message_snapshots(self),
            grade=self.grade,
            depth=self.depth,
            output_declaration=self.output_declaration,
            interactive=self.interactive,
            compactable=self.compactable,
            temporary=self.temporary,
            cache_main_objective=self.cache_main_objective,
            prior_spec_id=self.prior_spec_id if spec is None else spec.id,
            artifacts=registry_entries(self.artifact_registry),
            skills=self.admitted_skills(),
            stored_version=self.stored_version,
            usage=copy_entries(self.usage_ledger),
            turn=self.open_turn,
        )

    @staticmethod
    def from_snapshot(
        snapshot: ConversationPersistenceSnapshot, handler: ResponseHandler | None = None
    ) -> ConversationContext:
        """A fresh, unfrozen, unbound context holding ``snapshot``'s state.

        Raises:
            CorruptSnapshotError: a stored artifact's data does not fit its type.
        """
        c = ConversationContext(
            snapshot.conversation_id,
            user_id=snapshot.user_id,
            workflow_id=snapshot.workflow_id,
            temporary=snapshot.temporary,
            created_at=snapshot.created_at,
        )
        for key, block in snapshot.objective_slots():
            c.put_main_objective(key, revive(block))
        turn = snapshot.turn
        parked = turn.parked() if turn is not None else frozenset[str]()
        stored = repaired_messages(snapshot.messages, parked)
        c.messages = [m.to_message(handler) for m in stored]
        c.add_tools(snapshot.declared_tools)
        c.grade, c.depth = snapshot.grade, snapshot.depth
        c.output_declaration = snapshot.output_declaration
        c.interactive = snapshot.interactive
        c.compactable = snapshot.compactable
        c.cache_main_objective = snapshot.cache_main_objective
        c.prior_spec_id = snapshot.prior_spec_id
        c.stored_version = snapshot.stored_version
        c.open_turn = snapshot.turn
        c.usage_ledger.extend(snapshot.usage)  # its own fresh Ledger: an append keeps its token
        for skill in snapshot.skills:
            c.admit_skill(skill)
        # unknown aliases: skipped; data not fitting its type: CorruptSnapshotError
        restore_registry(c.artifact_registry, snapshot.artifacts, snapshot.conversation_id)
        if c.stored and stored is snapshot.messages:  # a repaired history differs from the
            c.mark_saved(c.stored_version, snapshot.messages)  # stored one: saved whole
        return c

    def is_frozen(self) -> bool:
        """True once this instance has rendered; never persisted."""
        return self._objective.frozen

    # -- the model binding (its budgets are its own: ``ModelBinding``) ----------------------

    model_binding: ModelBinding | None = None  # live, never persisted

    def set_model_binding(self, binding: ModelBinding) -> None:
        """Attach ``binding`` and wire it back to this conversation."""
        self.model_binding = binding
        binding.conversation = self

    @staticmethod
    def single_turn(spec: ModelSpec, prompt: str, backstop_tokens: int) -> ConversationContext:
        """A fresh one-turn task call: ``spec`` bound, one user message, thinking off
        (``IMMEDIATE``), the answer capped at ``backstop_tokens`` (on the message, so an
        escalation stays with this conversation and never leaks into the next one)."""
        context = ConversationContext(temporary=True)
        context.depth = Depth.IMMEDIATE
        context.output_declaration = backstop_tokens
        context.add_user_message(prompt, requested_output_tokens=backstop_tokens)
        context.set_model_binding(
            ModelBinding.resolved(spec, depth=Depth.IMMEDIATE, output_declaration=backstop_tokens)
        )
        return context


class ConversationPersistenceSnapshot(msgspec.Struct, kw_only=True):
    """Everything a conversation needs to come back, and nothing live (no binding, no freeze).

    Evolve by msgspec's rules: new fields get defaults; never reorder or retype a stored
    field. Its codec (``encode_snapshot``, ``decode_snapshot``) is ``snapshots``'."""

    version: int = FORMAT_VERSION
    conversation_id: str | None
    user_id: str | None = None
    workflow_id: str | None = None
    title: str = ""
    created_at: dt.datetime
    objective: list[ObjectiveSlot] = msgspec.field(default_factory=list)
    # written by nothing; read from records that predate named slots
    legacy_objective: list[ContentBlock] | None = msgspec.field(default=None, name="main_objective")
    declared_tools: list[ToolDefinitionBlock] = msgspec.field(default_factory=list)
    messages: list[MessageSnapshot] = msgspec.field(default_factory=list)
    grade: Grade | None = None
    depth: Depth | None = None
    output_declaration: OutputSize | int | None = None
    interactive: bool = False
    compactable: bool = True
    temporary: bool = False
    cache_main_objective: bool = True
    prior_spec_id: str | None = None
    # Top-level artifacts in their plain form; iterands ride inside their list.
    artifacts: list[dict[str, Any]] = msgspec.field(default_factory=list)
    skills: list[SkillBlock] = msgspec.field(default_factory=list)
    # The fencing version of the stored record: what a store loaded it at or saved it as
    # (0: never stored). A store stamps it from its own record on load; a save names it.
    stored_version: int = 0
    # The usage ledger in its plain form (model calls, compactions); never sent to a model.
    usage: list[dict[str, Any]] = msgspec.field(default_factory=list)
    # The open-turn record (``OpenTurn``) as the last save left it; None: written before it
    # existed, or no agent turn ran. Stores keep it beside the body, never in it.
    turn: OpenTurn | None = None

    @classmethod
    def of(cls, context: ConversationContext) -> ConversationPersistenceSnapshot:
        """``context.to_snapshot()``."""
        return context.to_snapshot()

    def to_conversation(self, handler: ResponseHandler | None = None) -> ConversationContext:
        """A fresh, unfrozen, unbound context holding this snapshot's state
        (``ConversationContext.from_snapshot``)."""
        return ConversationContext.from_snapshot(self, handler)

    def objective_slots(self) -> list[tuple[str, ContentBlock]]:
        """The stored objective as (key, block) pairs, in order.

        A legacy record's anonymous block list gets keys: a tool definition its ``tool:``
        slot, anything else ``objective-N`` by its place in the list.
        """
        if self.objective or not self.legacy_objective:
            return [(slot.key, slot.block) for slot in self.objective]
        return [
            (f"tool:{b.name}" if isinstance(b, ToolDefinitionBlock) else f"objective-{i}", b)
            for i, b in enumerate(self.legacy_objective)
        ]
