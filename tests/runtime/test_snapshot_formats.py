"""Every past snapshot format still decodes (STYLE 6): one checked-in record per version."""

from __future__ import annotations

from pathlib import Path

from parlour.runtime import Depth, Grade, OutputSize
from parlour.runtime import blocks as b
from parlour.runtime.snapshots import FORMAT_VERSION, decode_snapshot

DATA = Path(__file__).parent / "data"


def test_every_format_version_has_a_checked_in_record() -> None:
    assert sorted(p.name for p in DATA.glob("snapshot-v*.json")) == [
        f"snapshot-v{v}.json" for v in range(1, FORMAT_VERSION + 1)
    ]


def test_the_version_1_record_decodes_and_restores_intact() -> None:
    snapshot = decode_snapshot((DATA / "snapshot-v1.json").read_bytes(), "conv-v1")
    assert snapshot.version == 1
    c = snapshot.to_conversation()
    assert (c.conversation_id, c.user_id, c.workflow_id) == ("conv-v1", "alice", "wf-1")
    assert c.title == "What time is it?"
    assert [k for k in c.get_main_objective()] == ["task"]
    assert list(c.declared_tools()) == ["get_time"]
    assert [s.name for s in c.admitted_skills()] == ["brevity"]
    assert (c.grade, c.depth, c.output_declaration, c.interactive) == (
        Grade.SMALL,
        Depth.STANDARD,
        OutputSize.COMPACT,
        True,
    )
    assert [m.role for m in c.messages] == ["user", "assistant", "user", "assistant"]
    assert not c.messages[0].compactable
    kinds = [type(blk) for m in c.messages for blk in m.blocks]
    assert b.ToolResultBlock in kinds and b.RedactedThinkingBlock in kinds
    assert c.messages[3].raw_content == "It is noon."
