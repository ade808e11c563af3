"""The ``parlour`` command: the demo restores every conversation intact."""

from __future__ import annotations

from pathlib import Path

import pytest

from parlour.actors._cli import main


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
    listed = capsys.readouterr().out.strip().splitlines()
    assert len(listed) == 1 and "DemoThinker-conv-" in listed[0]
    cid = listed[0].split("\t")[0]
    assert main(["show", "user-0", cid, "--data-dir", data]) == 0
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
