"""Approvals in the ``parlour`` command, run as a person runs it: ``chat`` asks y/n for each
call waiting for approval (a reason on n), in the turn that parked and on ``--resume``;
``export`` carries the pending calls and ``import`` restores them, still decidable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parlour.runtime import TurnStep
from parlour.stores import LmdbStore

from .cli import parlour, refused

ASK = "approve get_current_time({})? [y/n] "


def _chat(where: Path, stdin: str, *argv: str) -> tuple[str, str]:
    """``parlour chat`` in ``where`` as ann, asking before get_current_time runs: its
    conversation id and its stdout."""
    done = parlour(
        where,
        "chat",
        "--user",
        "ann",
        "--data-dir",
        "data",
        "--needs-approval",
        "get_current_time",
        *argv,
        stdin=stdin,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    return done.stdout.split()[1], done.stdout


def _record(where: Path, cid: str, user: str = "ann") -> object:
    with LmdbStore(where / "data", readonly=True) as store:
        snapshot = store.load(cid, user)
    assert snapshot is not None
    return snapshot.turn


def test_chat_asks_before_a_call_that_needs_approval_and_runs_it_on_y(tmp_path: Path) -> None:
    cid, out = _chat(tmp_path, "what time is it\nmaybe\ny\n\n")
    asked = out.split(ASK)
    assert len(asked) == 3  # asked, "maybe" is no answer: asked again
    assert "answer y or n" in asked[1]
    assert "agent> The tools answered" in asked[2]  # the tool ran; the model read its result
    record = _record(tmp_path, cid)
    assert record is not None and record.step == TurnStep.DONE  # type: ignore[attr-defined]


def test_chat_gives_the_model_the_reason_of_a_no(tmp_path: Path) -> None:
    cid, out = _chat(tmp_path, "what time is it\nn\nnot now, please\n\n")
    assert out.count(ASK) == 1 and "reason> " in out
    assert "A person denied this call to get_current_time: not now, please" in out
    show = parlour(tmp_path, "show", "ann", cid, "--data-dir", "data")
    assert "not now, please" in show.stdout


def test_calls_left_undecided_are_asked_again_on_resume(tmp_path: Path) -> None:
    cid, out = _chat(tmp_path, "what time is it\n")  # the input ends at the question
    assert out.rstrip().endswith(ASK.rstrip())
    record = _record(tmp_path, cid)
    assert record.step == TurnStep.APPROVAL  # type: ignore[attr-defined]
    _, resumed = _chat(tmp_path, "y\nthanks\n\n", "--resume", cid)
    assert resumed.count(ASK) == 1
    after = resumed.split(ASK)[1]
    assert "agent> The tools answered" in after and "you said 'thanks'" in after


def test_chat_refuses_needs_approval_for_a_tool_it_does_not_have(tmp_path: Path) -> None:
    done = parlour(tmp_path, "chat", "--data-dir", "data", "--needs-approval", "rm_rf")
    assert "needs_approval names rm_rf" in refused(done)
    assert done.stdout == ""


@pytest.mark.parametrize("as_new", [False, True], ids=["same-id", "as-new"])
def test_export_carries_pending_calls_and_import_restores_them_decidable(
    tmp_path: Path, as_new: bool
) -> None:
    cid, _ = _chat(tmp_path, "what time is it\n")
    before = _record(tmp_path, cid)
    exported = parlour(tmp_path, "export", "ann", cid, "--versions", "--data-dir", "data")
    assert exported.returncode == 0, exported.stderr
    document = json.loads(exported.stdout)
    [pending] = document["snapshot"]["turn"]["pending"]
    assert pending["tool"] == "get_current_time"
    (tmp_path / "export.json").write_text(exported.stdout)
    moved = tmp_path / "elsewhere"
    (moved / "data").mkdir(parents=True)  # import writes only into a directory that exists
    extra = ["--as-new"] if as_new else []
    done = parlour(
        moved, "import", "ann", str(tmp_path / "export.json"), "--data-dir", "data", *extra
    )
    assert done.returncode == 0, done.stderr
    with LmdbStore(moved / "data", readonly=True) as store:
        [copy] = store.list_conversations("ann")
    assert (copy.conversation_id == cid) is not as_new
    assert _record(moved, copy.conversation_id) == before
    _, resumed = _chat(moved, "n\ncopied\n\n", "--resume", copy.conversation_id)
    assert "A person denied this call to get_current_time: copied" in resumed
    after = _record(moved, copy.conversation_id)
    assert after.step == TurnStep.DONE  # type: ignore[attr-defined]
    assert _record(tmp_path, cid) == before  # the original is untouched
