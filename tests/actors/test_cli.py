"""The ``parlour`` command: chat, the demo restoring every conversation intact, bench, list."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pykka
import pytest

from parlour.actors import Agent, ConversationService
from parlour.actors.app import _cases, _demo, _workload
from parlour.actors.app._cli import main
from parlour.actors.app._demo import demo_agent
from parlour.runtime import Depth, LLMResponse, OutputSize, PreparedConversation, ScriptedClient
from parlour.runtime.blocks import TextBlock
from parlour.runtime.errors import UncorrectableLLMError
from parlour.stores import LmdbStore


def test_the_demo_restores_and_continues_every_conversation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--data-dir", str(tmp_path / "data"), "--conversations", "6"]) == 0
    out = capsys.readouterr().out
    assert "restored 6/6 intact" in out
    assert "get_current_time" in out  # the transcript shows the tool call
    assert "turns/s" in out


def test_list_and_show_read_what_the_demo_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path / "data")
    main(["demo", "--data-dir", data, "--conversations", "4"])
    capsys.readouterr()
    assert main(["list", "user-0", "--data-dir", data]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if "AgentThinker-conv-" in line]
    assert len(listed) == 1
    cid = listed[0].split("\t")[0]  # piped: one tab-separated line each
    assert main(["show", "user-0", cid, "--json", "--data-dir", data]) == 0
    assert '"conversation_id":"' + cid in capsys.readouterr().out
    assert main(["show", "user-0", "missing", "--data-dir", data]) == 1


def test_bad_arguments_are_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--data-dir", str(tmp_path), "--conversations", "0"])
    assert not any(tmp_path.iterdir())


def test_bench_prints_a_results_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--conversations", "6", "--turns", "2", "--workers", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("6 conversations x 2 turns, 2 threads")
    turns, _, per_second, _, _ = out[2].split()
    assert turns == "12" and float(per_second.replace(",", "")) > 0


def test_chat_streams_answers_and_resumes_a_stored_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path / "data")
    monkeypatch.setattr("sys.stdin", io.StringIO("Hello there\nWhat is get_current_time?\n"))
    assert main(["chat", "--data-dir", data, "--user", "ann"]) == 0
    out = capsys.readouterr().out
    cid = out.split()[1]
    assert "agent> Answer 1: you said 'Hello there'." in out
    assert "[get_current_time({}) -> 20" in out  # the tool call and its result, inline
    monkeypatch.setattr("sys.stdin", io.StringIO("Still there?\n/quit\n"))
    assert main(["chat", "--data-dir", data, "--user", "ann", "--resume", cid]) == 0
    assert f"conversation {cid}" in capsys.readouterr().out
    with LmdbStore(tmp_path / "data") as store:
        snapshot = store.load(cid, "ann")
    assert snapshot is not None
    said = [
        b.text
        for m in snapshot.messages
        if m.role == "user"
        for b in m.blocks
        if isinstance(b, TextBlock)
    ]
    assert said == ["Hello there", "What is get_current_time?", "Still there?"]


def test_chat_refuses_an_unknown_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["chat", "--data-dir", str(tmp_path), "--model", "no-such-model"]) == 1
    assert "no-such-model" in capsys.readouterr().err


def test_ctrl_c_stops_the_demo_cleanly_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[int] = []

    def interrupted_drive(*args: object, **kwargs: object) -> None:
        started.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(_demo, "drive", interrupted_drive)
    assert main(["demo", "--data-dir", str(tmp_path / "data")]) == 130
    assert "interrupted" in capsys.readouterr().err and started == [1]
    assert pykka.ActorRegistry.get_all() == []  # the service was stopped
    with LmdbStore(tmp_path / "data"):  # and the store closed: it opens again
        pass


def test_a_keyboard_interrupt_stops_the_workload_before_new_turns_start(
    service: ConversationService,
) -> None:
    chats = [demo_agent().chat(service, user_id="u") for _ in range(4)]
    turns: list[int] = []

    def on_turn() -> None:
        turns.append(1)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _workload.drive(chats, lambda i, t: f"turn {t}", turns=50, workers=1, on_turn=on_turn)
    assert len(turns) < 4 * 50  # the rest never started
    assert all(service.owning_thinker(c.conversation_id, "u") is None for c in chats)


def test_the_long_demo_compacts_one_conversation_and_keeps_going(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["demo", "--long", "--data-dir", str(tmp_path / "data")]
    assert main([*argv, "--window", "8000", "--long-turns", "30"]) == 0
    out = capsys.readouterr().out
    compactions = [line for line in out.splitlines() if line.startswith("  turn ")]
    assert compactions and all(" -> " in line and "tokens" in line for line in compactions)
    assert "light" in out and "compaction levels climbed" in out


def test_bench_case_prints_every_path_against_the_floor_and_the_restore_rate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(_cases.CASES, "cold", _cases.Shape(4, 2, workers=2, cold=True))
    assert main(["bench", "--case", "cold", "--no-sync"]) == 0
    out = capsys.readouterr().out
    assert "cold 4x2 on 2 threads, unsynced commits" in out
    rows = [line for line in out.splitlines() if line.startswith("│")]
    paths = [row.split("│")[1].strip() for row in rows]
    assert paths == [
        "floor",
        "service",
        "service, gated",
        "agent",
        "service, 1 CPU",
        "agent, 1 CPU",
    ]
    assert rows[0].split("│")[-2].strip() == "1.00x"
    line = out.split("restore (cold): ")[1].splitlines()[0]
    found = re.fullmatch(
        r"([\d,]+) conversations/s on 2 threads \(([\d,]+) gated\), ([\d,]+) on them with 1 CPU, "
        r"([\d,]+) on one thread",
        line,
    )
    assert found is not None, line
    assert all(float(rate.replace(",", "")) > 0 for rate in found.groups())


def test_chat_offers_to_finish_an_interrupted_turn_and_resume_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def down(_: PreparedConversation) -> LLMResponse:
        raise UncorrectableLLMError("The model is down.")

    agent = Agent(ScriptedClient([down]), output=OutputSize.COMPACT, depth=Depth.IMMEDIATE)
    with LmdbStore(tmp_path / "data") as store, ConversationService(store) as service:
        chat = agent.chat(service, user_id="ann")
        with pytest.raises(UncorrectableLLMError):
            chat.send("Are you there?")
    cid = chat.conversation_id
    monkeypatch.setattr("sys.stdin", io.StringIO("/resume\n/quit\n"))
    data = str(tmp_path / "data")
    assert main(["chat", "--data-dir", data, "--user", "ann", "--resume", cid]) == 0
    out = capsys.readouterr().out
    assert "its last turn was interrupted: /resume finishes it" in out
    assert "agent> Answer 1: you said 'Are you there?'." in out
    with LmdbStore(tmp_path / "data") as store:
        snapshot = store.load(cid, "ann")
    assert snapshot is not None
    assert [m.role for m in snapshot.messages] == ["user", "assistant"]  # no second question
