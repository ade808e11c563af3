"""A message's memoized snapshot and turn: kept while it is unchanged, forgotten on change.

The memos are what a save and a render reuse for every settled message, so they must never
outlive a real change, and must survive what is no change (construction, filling a memo,
re-setting the value a field already holds).
"""

from __future__ import annotations

import gc
import pickle
import threading

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from parlour.runtime import (
    ConversationContext,
    GenericContentFormatter,
    IncomingMessage,
    Message,
    OutgoingMessage,
    ThinkingResponseHandler,
)
from parlour.runtime._messages import last_change
from parlour.runtime._prepared import Turn
from parlour.runtime._render import Renderer
from parlour.runtime._settled import Messages, Settled
from parlour.runtime.blocks import ContentBlock, PojoBlock, TextBlock, ToolDefinitionBlock
from parlour.runtime.snapshots import MessageSnapshot, message_snapshots
from tests.runtime._list_changes import EVERY_CHANGE, LIST_CHANGES


class Answer(msgspec.Struct):
    summary: str


HANDLER = ThinkingResponseHandler(Answer)


def render_turns(messages: list[Message]) -> Renderer:
    renderer = Renderer(lambda b: b, native_tools=False, thinking_active=False)
    renderer.walk(messages)
    return renderer


def test_building_snapshotting_and_rendering_messages_never_counts_as_a_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    changes: list[Message] = []
    forget = Message._forget

    def counted(m: Message) -> None:
        changes.append(m)
        forget(m)

    monkeypatch.setattr(Message, "_forget", counted)
    c = ConversationContext("memo-1")
    c.add_user_message("hello")
    c.add_message(OutgoingMessage(blocks=[TextBlock(text="asked")], response_handler=HANDLER))
    c.add_message(IncomingMessage(blocks=[TextBlock(text="hi")], response_handler=HANDLER))
    for _ in range(2):
        c.to_snapshot()
        c.prepare_messages_for_llm(GenericContentFormatter())
    restored = c.to_snapshot().to_conversation()
    restored.to_snapshot()
    assert changes == []
    assert all(m._snapshot is not None for m in c.messages)


def test_a_messages_kept_snapshot_and_turn_are_no_work_for_the_cycle_collector() -> None:
    """The memos every message of a live conversation keeps (its snapshot, its rendered
    turn) hold only blocks, so they close no cycle and the collector does not track them:
    a full pass over many live conversations visits five objects per message, not seven."""
    c = ConversationContext("memo-gc")
    c.add_user_message("hello")
    c.add_message(IncomingMessage(blocks=[TextBlock(text="hi")], response_handler=HANDLER))
    c.to_snapshot()
    c.prepare_messages_for_llm(GenericContentFormatter())
    for m in c.messages:
        assert m._snapshot is not None and m._turn is not None
        assert not gc.is_tracked(m._snapshot)
        assert not gc.is_tracked(m._turn)


def test_re_setting_the_value_a_field_holds_keeps_the_memos_and_a_new_value_forgets_them() -> None:
    m = OutgoingMessage("hi", [TextBlock(text="hi")])
    snapshot = MessageSnapshot.of(m)
    turn = render_turns([m]).scan.turns[0]
    m.cache = False
    m.compactable = True
    m.response_handler = None
    assert MessageSnapshot.of(m) is snapshot and m._turn is turn
    m.cache = True
    assert m._snapshot is None and m._turn is None
    assert MessageSnapshot.of(m).cache and render_turns([m]).scan.turns[0].cache


def test_a_new_handler_forgets_the_turn_so_the_next_render_carries_its_instructions() -> None:
    m = OutgoingMessage("hi", [TextBlock(text="hi")])
    plain = render_turns([m]).scan.turns[0]
    m.response_handler = HANDLER
    asked = render_turns([m]).scan.turns[0]
    assert len(asked.blocks) == len(plain.blocks) + 1


BLOCKS = st.sampled_from(
    [
        TextBlock(text="plain"),
        TextBlock(text="caf\u00e9"),
        PojoBlock(value={"k": [1, 2]}),
        ToolDefinitionBlock(name="lookup", description="Looks up."),
    ]
)
FLAGS = st.sampled_from(["compactable", "app_authored", "cache"])


class MemoMachine(RuleBasedStateMachine):
    """Any sequence of changes, saves and renders: the memos always equal a fresh build."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[Message] = [
            OutgoingMessage("ask", [TextBlock(text="ask")]),
            IncomingMessage(blocks=[TextBlock(text="answer")]),
        ]

    @rule(at=st.integers(0, 1), flag=FLAGS, value=st.booleans())
    def set_flag(self, at: int, flag: str, value: bool) -> None:
        setattr(self.messages[at], flag, value)

    @rule(at=st.integers(0, 1), tokens=st.none() | st.integers(1, 9))
    def set_tokens(self, at: int, tokens: int | None) -> None:
        self.messages[at].requested_output_tokens = tokens

    @rule(at=st.integers(0, 1), blocks=st.lists(BLOCKS, max_size=3))
    def set_blocks(self, at: int, blocks: list[ContentBlock]) -> None:
        self.messages[at].blocks = blocks

    @rule(at=st.integers(0, 1), block=BLOCKS)
    def append_block(self, at: int, block: ContentBlock) -> None:
        self.messages[at].blocks.append(block)

    @rule(at=st.integers(0, 1))
    def pop_block(self, at: int) -> None:
        if self.messages[at].blocks:
            self.messages[at].blocks.pop()

    @rule(asks=st.booleans())
    def set_handler(self, asks: bool) -> None:
        message = self.messages[0]
        assert isinstance(message, OutgoingMessage)
        message.response_handler = HANDLER if asks else None

    @rule()
    def save(self) -> None:
        for m in self.messages:
            MessageSnapshot.of(m)

    @invariant()
    def the_memoized_snapshot_is_a_fresh_one(self) -> None:
        for m in self.messages:
            assert MessageSnapshot.of(m) == MessageSnapshot._build(m)

    @invariant()
    def the_render_is_a_render_that_trusts_no_memo(self) -> None:
        memoized = render_turns(self.messages)
        fresh = Renderer(lambda b: b, native_tools=False, thinking_active=False)
        turns = [fresh._fresh_turn(m) for m in self.messages]
        assert memoized.scan.turns == turns
        assert memoized.scan.announced == fresh.scan.announced
        assert memoized.scan.uses_notation == fresh.scan.uses_notation


TestMemoMachine = MemoMachine.TestCase
TestMemoMachine.settings = settings(max_examples=60, stateful_step_count=12, deadline=None)


@given(st.lists(st.tuples(st.booleans(), st.lists(BLOCKS, max_size=2)), max_size=8))
def test_property_a_walk_builds_only_what_has_no_memo_in_message_order(
    shape: list[tuple[bool, list[ContentBlock]]],
) -> None:
    messages: list[Message] = [
        OutgoingMessage(blocks=blocks, response_handler=HANDLER if asks else None)
        for asks, blocks in shape
    ]
    first = render_turns(messages).scan
    again = render_turns(messages).scan
    assert again.turns == first.turns
    assert list(again.announced) == list(first.announced)
    settled = [m for m in messages if m._turn is not None]
    assert all(t is m._turn for t, m in zip(again.turns, messages, strict=True) if m in settled)


# -- settled messages: what a render and a save keep for the next one -------------------------


def test_a_change_to_a_settled_message_reaches_the_next_render_and_save() -> None:
    c = ConversationContext("settled-1")
    for text in ("one", "two", "three"):
        c.add_user_message(text)
        c.add_message(IncomingMessage(text.upper()))
        c.to_snapshot(), c.prepare_messages_for_llm(GenericContentFormatter())
    c.messages[0].blocks.append(TextBlock(text="and more"))
    c.messages[3].cache = True
    saved = c.to_snapshot().messages
    turns = c.prepare_messages_for_llm(GenericContentFormatter()).turns
    assert [b.text for b in saved[0].blocks] == ["one", "and more"]  # type: ignore[union-attr]
    assert turns[0].blocks == saved[0].blocks and turns[3].cache and saved[3].cache


def test_a_shortened_or_replaced_message_list_is_read_afresh() -> None:
    c = ConversationContext("settled-2")
    for text in ("one", "two", "three"):
        c.add_user_message(text)
    c.to_snapshot(), c.prepare_messages_for_llm(GenericContentFormatter())
    del c.messages[0]
    assert [m.raw_content for m in c.to_snapshot().messages] == ["two", "three"]
    c.messages = [OutgoingMessage("four", [TextBlock(text="four")]), *c.messages]
    turns = c.prepare_messages_for_llm(GenericContentFormatter()).turns
    assert [t.blocks[0].text for t in turns] == ["four", "two", "three"]  # type: ignore[union-attr]


@pytest.mark.parametrize("change", sorted(LIST_CHANGES))
def test_every_change_to_a_message_list_but_an_append_moves_the_change_stamp(change: str) -> None:
    c = ConversationContext("list-stamp")
    for text in ("one", "two", "three"):
        c.add_user_message(text)
    before = last_change()
    c.messages.append(OutgoingMessage("four"))
    c.messages.extend([OutgoingMessage("five")])
    c.messages += [OutgoingMessage("six")]
    assert last_change() == before  # appends leave every leading message where it was
    LIST_CHANGES[change](c.messages, 1, OutgoingMessage("new"))
    assert last_change() != before


def test_a_list_given_as_the_messages_is_copied_into_one_that_notes_its_changes() -> None:
    c = ConversationContext("assigned")
    given = [OutgoingMessage("one", [TextBlock(text="one")])]
    c.messages = given
    assert type(c.messages) is Messages and c.messages == given
    given.append(OutgoingMessage("not in the conversation"))
    c.prepare_messages_for_llm(GenericContentFormatter())
    c.messages[0] = OutgoingMessage("two", [TextBlock(text="two")])
    turns = c.prepare_messages_for_llm(GenericContentFormatter()).turns
    assert [t.blocks[0].text for t in turns] == ["two"]  # type: ignore[union-attr]
    kept = c.messages
    c.messages = kept
    assert c.messages is kept  # already such a list: taken as it is


@pytest.mark.parametrize("change", sorted(EVERY_CHANGE))
def test_a_saves_list_of_kept_snapshots_forgets_where_it_came_from_on_any_change(
    change: str,
) -> None:
    c = ConversationContext("copied")
    for text in ("one", "two", "three"):
        c.add_user_message(text)
    snapshots = message_snapshots(c)
    origin = getattr(snapshots, "origin", None)
    assert origin is not None and getattr(snapshots.copy(), "origin", None) is origin
    new = MessageSnapshot.of(OutgoingMessage("new"))
    EVERY_CHANGE[change](snapshots, 1, new)
    assert getattr(snapshots, "origin", None) is None


def test_nothing_is_kept_as_settled_for_a_plain_list_whose_changes_move_no_stamp() -> None:
    messages: list[Message] = [OutgoingMessage("one", [TextBlock(text="one")])]
    settled: Settled[Turn | None] = Settled()
    Renderer(lambda b: b, native_tools=False, thinking_active=False).walk(messages, settled)
    messages[0] = OutgoingMessage("two", [TextBlock(text="two")])  # no stamp moves
    assert settled.settled(messages, last_change()) == 0


def test_every_change_takes_a_stamp_no_reader_saw_before_it_even_across_threads() -> None:
    workers, rounds = 4, 500
    start = threading.Barrier(workers + 1)

    def churn() -> None:
        m = OutgoingMessage("x", [TextBlock(text="x")])
        start.wait()
        for i in range(rounds):
            m.cache = bool(i % 2)

    threads = [threading.Thread(target=churn) for _ in range(workers)]
    for t in threads:
        t.start()
    mine = OutgoingMessage("y", [TextBlock(text="y")])
    start.wait()
    stale = []
    for _ in range(rounds):
        before = last_change()
        mine.cache = not mine.cache
        stale.append(last_change() == before)
    for t in threads:
        t.join()
    assert not any(stale)


SETTLED_BLOCKS = st.lists(BLOCKS.filter(lambda b: not isinstance(b, PojoBlock)), max_size=2)


class SettledMachine(RuleBasedStateMachine):
    """Any changes to a conversation's messages and list between renders and saves: each
    save and render equals one that keeps nothing from before."""

    def __init__(self) -> None:
        super().__init__()
        self.c = ConversationContext("settled-m")

    @rule(blocks=SETTLED_BLOCKS, asks=st.booleans(), incoming=st.booleans())
    def add(self, blocks: list[ContentBlock], asks: bool, incoming: bool) -> None:
        handler = HANDLER if asks else None
        kind = IncomingMessage if incoming else OutgoingMessage
        self.c.add_message(kind("said", blocks, response_handler=handler))

    @rule(at=st.integers(0, 9), block=BLOCKS, flag=FLAGS, value=st.booleans())
    def change(self, at: int, block: ContentBlock, flag: str, value: bool) -> None:
        if self.c.messages:
            m = self.c.messages[at % len(self.c.messages)]
            m.blocks.append(block)
            setattr(m, flag, value)

    @rule(at=st.integers(0, 9))
    def drop(self, at: int) -> None:
        if self.c.messages:
            del self.c.messages[at % len(self.c.messages)]

    @rule()
    def replace_list(self) -> None:
        self.c.messages = list(reversed(self.c.messages))

    @rule(change=st.sampled_from(sorted(LIST_CHANGES)), at=st.integers(0, 9))
    def change_the_list_in_place(self, change: str, at: int) -> None:
        if self.c.messages:
            new = OutgoingMessage(f"new {at}", [TextBlock(text=f"new {at}")])
            LIST_CHANGES[change](self.c.messages, at, new)

    @invariant()
    def a_save_keeps_nothing_stale(self) -> None:
        saved = self.c.to_snapshot().messages
        assert saved == [MessageSnapshot._build(m) for m in self.c.messages]

    @invariant()
    def a_render_keeps_nothing_stale(self) -> None:
        turns = self.c.prepare_messages_for_llm(GenericContentFormatter()).turns
        fresh = Renderer(self.c._to_llm_block, native_tools=False, thinking_active=False)
        assert turns == [fresh._fresh_turn(m) for m in self.c.messages]


TestSettledMachine = SettledMachine.TestCase
TestSettledMachine.settings = settings(max_examples=60, stateful_step_count=15, deadline=None)


@pytest.mark.parametrize("change", sorted(EVERY_CHANGE))
def test_every_change_in_place_to_a_messages_blocks_forgets_its_snapshot(change: str) -> None:
    m = OutgoingMessage("m", [TextBlock(text="one"), TextBlock(text="two")])
    kept = MessageSnapshot.of(m)
    before = last_change()
    blocks = m.blocks  # another name: no assignment to the message tells it
    new = TextBlock(text="new")
    EVERY_CHANGE[change](blocks, 1, new)
    assert MessageSnapshot.of(m) is not kept and last_change() != before
    assert MessageSnapshot.of(m).blocks == list(m.blocks)


def test_a_block_list_outliving_its_message_still_checks_blocks_and_changes_quietly() -> None:
    blocks = OutgoingMessage("gone", [TextBlock(text="kept")]).blocks  # the message is freed
    blocks.append(TextBlock(text="added"))  # nothing left to forget: no error
    assert [b.text for b in blocks if isinstance(b, TextBlock)] == ["kept", "added"]
    with pytest.raises(ValueError, match="a message block 2"):
        blocks.append(TextBlock(text="\ud800"))
    assert len(blocks) == 2


def test_a_message_with_blocks_pickles_and_its_copy_still_checks_its_blocks() -> None:
    message = IncomingMessage(blocks=[TextBlock(text="yo")], compactable=False)
    copy = pickle.loads(pickle.dumps(message))
    assert type(copy) is IncomingMessage and copy.compactable is False
    assert copy.blocks == [TextBlock(text="yo")] and copy.role == "assistant"
    with pytest.raises(ValueError, match=r"IncomingMessage \(role 'assistant'\) block 1"):
        copy.blocks.append(TextBlock(text="\ud800"))
