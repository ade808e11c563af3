"""OpenAI's reasoning items come back from every store exactly as they were saved: the item's
JSON, byte for byte, beside its summary and the id it is paired with, in its place among
the answer's blocks, and again after the conversation is saved a second time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from parlour.runtime import ConversationContext, IncomingMessage
from parlour.runtime.blocks import ContentBlock, ReasoningBlock, TextBlock, ToolUseBlock
from parlour.stores import LmdbStore, MemoryStore, PersistentStore, PostgresStore

ITEM = {
    "id": "rs_9",
    "summary": [{"type": "summary_text", "text": "Weigh it — twice, \u00e9t\u00e9 \U0001f9ea."}],
    "type": "reasoning",
    "encrypted_content": "gAAAAB" + "x/+=_-" * 4_000,  # tens of kilobytes, as real ones are
}
FIRST = ReasoningBlock(
    item_json=json.dumps(ITEM, ensure_ascii=False),
    summary="Weigh it — twice, \u00e9t\u00e9 \U0001f9ea.",
    followed_by="fc_9",
)
ANSWER: list[ContentBlock] = [
    FIRST,
    ToolUseBlock(id="call_9", name="weigh", input_json='{"kg":1}'),
    ReasoningBlock(item_json='{"id":"rs_10","type":"reasoning","summary":[]}'),
    TextBlock(text="Done."),
]


@pytest.fixture(params=["memory", "lmdb", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PersistentStore]:
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "lmdb":
        with LmdbStore(tmp_path / "db") as made:
            yield made
    else:
        conninfo = request.getfixturevalue("postgres_conninfo")
        with PostgresStore(conninfo) as made:
            yield made


def test_reasoning_blocks_come_back_byte_for_byte(store: PersistentStore) -> None:
    c = ConversationContext("reasoning-1")
    c.add_user_message("Weigh the parcel.")
    c.add_message(IncomingMessage(blocks=list(ANSWER)))
    store.create_context(c.to_snapshot(), "alice")
    c.stored_version = store.version_of("reasoning-1", "alice") or 0
    c.add_user_message("Again.")
    c.stored_version = store.save_context(c.to_snapshot(), "alice")
    loaded = store.load("reasoning-1", "alice")
    assert loaded is not None
    blocks = loaded.to_conversation().messages[1].blocks
    assert blocks == ANSWER
    first = blocks[0]
    assert isinstance(first, ReasoningBlock)
    assert first.item_json.encode() == FIRST.item_json.encode()
    assert json.loads(first.item_json) == ITEM
