"""What a conversation added since its last save (``changes_since_save``): exact whenever it
answers, and answering whenever adding is all that happened.

A store writes an ``Appended`` instead of the whole snapshot, so the one property that
matters is that applying it to the snapshot last saved gives, byte for byte, the snapshot a
whole save would have written; the other is that the usual turn (messages, ledger entries
and the open-turn record added) is taken as an append, not saved whole.
"""

from __future__ import annotations

import msgspec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from parlour.runtime import (
    Artifact,
    ConversationContext,
    Depth,
    Grade,
    IncomingMessage,
    OutgoingMessage,
    OutputSize,
    type_alias,
)
from parlour.runtime._settled import Ledger
from parlour.runtime.blocks import PojoBlock, SkillBlock, TextBlock, ToolDefinitionBlock
from parlour.runtime.snapshots import (
    ConversationPersistenceSnapshot,
    OpenTurn,
    applied,
    encode_snapshot,
)
from tests.runtime._list_changes import LIST_CHANGES

# every field of the stored form, and what proves it unchanged when a save only appends
COVERED = {
    "version": "the format: a constant",
    "conversation_id": "identity of the scalar",
    "user_id": "identity of the scalar",
    "workflow_id": "identity of the scalar",
    "title": "the first user utterance, present at the mark",
    "created_at": "identity of the scalar",
    "objective": "the objective map's change counter, and no PojoBlock slot",
    "legacy_objective": "never written",
    "declared_tools": "the palette's change counter",
    "messages": "the saved ones' memoized snapshots, by identity",
    "grade": "identity of the scalar",
    "depth": "identity of the scalar",
    "output_declaration": "identity of the scalar",
    "interactive": "identity of the scalar",
    "compactable": "identity of the scalar",
    "temporary": "identity of the scalar",
    "cache_main_objective": "identity of the scalar",
    "prior_spec_id": "identity of the scalar (or of the bound spec's id)",
    "artifacts": "none registered",
    "skills": "the palette's change counter",
    "stored_version": "the mark's version",
    "usage": "the ledger's origin token and length",
    "turn": "carried by every append",
}


def test_every_field_of_the_stored_form_is_covered_by_the_mark() -> None:
    fields = {f.name for f in msgspec.structs.fields(ConversationPersistenceSnapshot)}
    assert fields == set(COVERED)


def _saved(context: ConversationContext) -> ConversationPersistenceSnapshot:
    """A whole save of ``context`` as the next version, marked as persisters mark it."""
    context.stored_version += 1
    snapshot = context.to_snapshot()
    context.mark_saved(context.stored_version, snapshot.messages)
    return snapshot


def test_a_turn_that_only_adds_is_an_append_of_exactly_what_it_added() -> None:
    context = ConversationContext("c1", user_id="alice")
    context.add_user_message("Where is my order?")
    before = _saved(context)
    context.add_message(IncomingMessage("It shipped."))
    context.usage_ledger.append({"input_tokens": 12, "output_tokens": 3})
    context.open_turn = OpenTurn(id="t1", step="done", start=0)
    appended = context.changes_since_save()
    assert appended is not None
    assert (appended.start, appended.usage_start, appended.version) == (1, 0, 1)
    assert [m.raw_content for m in appended.messages] == ["It shipped."]
    assert appended.usage == [{"input_tokens": 12, "output_tokens": 3}]
    after = applied(before, appended, 1)
    assert after is not None and encode_snapshot(after) == encode_snapshot(context.to_snapshot())


def test_an_equal_value_of_another_type_is_a_change_not_an_append() -> None:
    context = ConversationContext("c1", user_id="alice")
    context.add_user_message("Hello")
    _saved(context)
    context.interactive = 1  # type: ignore[assignment]  # encodes apart from True/False
    assert context.changes_since_save() is None


def test_no_mark_no_append_and_a_failed_save_forgets_it() -> None:
    context = ConversationContext("c1", user_id="alice")
    context.add_user_message("Hello")
    assert context.changes_since_save() is None
    _saved(context)
    assert context.changes_since_save() is not None
    context.unmark_saved()
    assert context.changes_since_save() is None


class Marks(RuleBasedStateMachine):
    """Any mix of the changes a conversation can take, and saves (whole, or as the append
    ``changes_since_save`` offers), against the snapshot last saved."""

    def __init__(self) -> None:
        super().__init__()
        self.context = ConversationContext("c1", user_id="alice")
        self.context.add_user_message("The first question")
        self.last = _saved(self.context)
        self.only_added = True
        self.n = 0

    def _fresh(self) -> str:
        self.n += 1
        return f"m{self.n}"

    # -- what only adds -----------------------------------------------------------------

    @rule()
    def add_an_answer(self) -> None:
        self.context.add_message(IncomingMessage(self._fresh()))

    @rule()
    def add_a_user_message(self) -> None:
        if self.context.first_user_utterance() is None:
            self.only_added = False  # it titles the conversation
        self.context.add_user_message(self._fresh())

    @rule()
    def add_a_ledger_entry(self) -> None:
        self.context.usage_ledger.append({"n": self.n, "cost": 0.5})

    @rule(step=st.sampled_from(["user", "answer", "tools", "done"]))
    def move_the_open_turn(self, step: str) -> None:
        self.context.open_turn = OpenTurn(id=self._fresh(), step=step)  # type: ignore[arg-type]

    # -- what changes more ---------------------------------------------------------------

    @precondition(lambda self: len(self.context.messages) > 0)
    @rule(change=st.sampled_from(sorted(LIST_CHANGES)), at=st.integers(0, 50))
    def change_the_messages_in_place(self, change: str, at: int) -> None:
        LIST_CHANGES[change](self.context.messages, at, OutgoingMessage(self._fresh()))
        self.only_added = False

    @precondition(lambda self: len(self.context.messages) > 0)
    @rule(at=st.integers(0, 50), how=st.sampled_from(["flag", "blocks", "same"]))
    def change_a_message(self, at: int, how: str) -> None:
        message = self.context.messages[at % len(self.context.messages)]
        if how == "flag":
            message.cache = not message.cache
        elif how == "blocks":
            message.blocks.append(TextBlock(text=self._fresh()))
        else:
            message.cache = message.cache  # no change: the memo may stay
            return
        self.only_added = False

    @rule()
    def replace_the_message_list(self) -> None:
        self.context.messages = list(self.context.messages)  # the same messages, a new list
        # no change of content: an append may still be offered, and must still be exact

    @precondition(lambda self: len(self.context.usage_ledger) > 0)
    @rule(change=st.sampled_from(sorted(LIST_CHANGES)), at=st.integers(0, 50))
    def change_the_ledger_in_place(self, change: str, at: int) -> None:
        LIST_CHANGES[change](self.context.usage_ledger, at, {"rewritten": self.n})
        self.only_added = False

    @rule(plain=st.booleans())
    def replace_the_ledger(self, plain: bool) -> None:
        entries = list(self.context.usage_ledger)
        # a plain list cannot tell its changes: such a conversation is always saved whole
        self.context.usage_ledger = entries if plain else Ledger(entries)
        self.only_added = False

    @rule(
        field=st.sampled_from(
            ["grade", "depth", "output_declaration", "interactive", "compactable", "workflow"]
        )
    )
    def change_a_setting(self, field: str) -> None:
        c = self.context
        if field == "grade":
            c.grade = Grade.LARGE if c.grade is not Grade.LARGE else Grade.SMALL
        elif field == "depth":
            c.depth = Depth.THOROUGH if c.depth is not Depth.THOROUGH else Depth.IMMEDIATE
        elif field == "output_declaration":
            c.output_declaration = OutputSize.COMPACT if c.output_declaration else 1234
        elif field == "interactive":
            c.interactive = not c.interactive
        elif field == "compactable":
            c.compactable = not c.compactable
        else:
            c.workflow_id = self._fresh()
        self.only_added = False

    @rule(kind=st.sampled_from(["text", "pojo", "tool", "skill"]))
    def change_the_body(self, kind: str) -> None:
        c = self.context
        if kind == "text":
            c.put_main_objective(self._fresh(), "Be brief.")
        elif kind == "pojo":
            c.put_main_objective(self._fresh(), PojoBlock(value={"rule": self.n}))
        elif kind == "tool":
            c.add_tools([ToolDefinitionBlock(name=self._fresh(), description="A tool.")])
        else:
            c.admit_skill(SkillBlock(name=self._fresh(), body="Do it well."))
        self.only_added = False

    @rule()
    def change_a_pojo_slot_in_place(self) -> None:
        for key, block in self.context.get_main_objective().items():
            if isinstance(block, PojoBlock) and isinstance(block.value, dict):
                block.value["rule"] = f"changed {key}"
                self.only_added = False

    # -- saves ---------------------------------------------------------------------------

    @rule(append=st.booleans())
    def save(self, append: bool) -> None:
        c = self.context
        appended = c.changes_since_save() if append else None
        if appended is None:
            self.last = _saved(c)
        else:
            c.stored_version += 1
            after = applied(self.last, appended, c.stored_version)
            assert after is not None
            self.last = after
            c.mark_saved(c.stored_version, appended=appended)
        self.only_added = True

    # -- the properties ------------------------------------------------------------------

    @invariant()
    def an_append_is_exactly_what_a_whole_save_writes(self) -> None:
        appended = self.context.changes_since_save()
        if appended is None:
            return
        after = applied(self.last, appended, self.context.stored_version)
        assert after is not None
        assert encode_snapshot(after) == encode_snapshot(self.context.to_snapshot())

    @invariant()
    def what_only_added_is_an_append(self) -> None:
        c = self.context
        pojo = any(isinstance(b, PojoBlock) for b in c.get_main_objective().values())
        if self.only_added and not pojo and type(c.usage_ledger) is Ledger:
            assert c.changes_since_save() is not None


Marks.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_marks_tell_an_append_exactly = Marks.TestCase


@type_alias("appended-note")
class Note(Artifact):
    text: str = ""


def test_a_conversation_with_artifacts_is_always_saved_whole() -> None:
    context = ConversationContext("c1", user_id="alice")
    context.add_user_message("Hello")
    context.artifact_registry.register(Note(text="kept"))
    _saved(context)
    context.add_message(IncomingMessage("Hi."))
    assert context.changes_since_save() is None  # an artifact may change in place
