"""``parlour bench --case`` over several rounds: each path shows the round whose ratio to
its own round's floor is the median, with the lowest and highest ratio; the floor shows its
median round by turns/s; the restore rates their medians; a bad round count is refused."""

from __future__ import annotations

import pytest

from parlour.actors.app import _cases
from parlour.actors.app._bench import PATHS, summarize
from parlour.actors.app._cases import CaseResult, Measured, Shape
from parlour.actors.app._cli import main
from parlour.actors.app._workload import TurnStats


def _measured(turns_per_s: float, cpu: float = 0.5e-3) -> Measured:
    return Measured(TurnStats(100, 100 / turns_per_s, [1e-3] * 100), cpu)


def _round(floor: float, service: float, restore: float) -> CaseResult:
    paths = {field: _measured(service) for _, field in PATHS}
    paths["floor"] = _measured(floor)
    return CaseResult(
        name="default",
        shape=Shape(10, 2),
        restore_per_s=restore,
        restore_gated_per_s=restore + 1,
        restore_one_cpu_per_s=restore + 2,
        restore_one_thread_per_s=restore + 3,
        **paths,
    )


def test_each_path_shows_its_median_round_by_its_ratio_to_that_rounds_floor() -> None:
    # by turns/s alone the middle round would be the second; by ratio it is the third
    rounds = [_round(1000, 500, 10), _round(2000, 600, 30), _round(1500, 600, 20)]
    summary = summarize(rounds)
    assert summary.rounds == 3
    assert [figures.path for figures in summary.paths] == [path for path, _ in PATHS]
    floor, service = summary.paths[0], summary.paths[1]
    assert floor.median.stats.turns_per_second == pytest.approx(1500)
    assert (floor.ratio, floor.low, floor.high) == (1.0, 1.0, 1.0)
    assert service.ratio == pytest.approx(0.4)
    assert service.median is rounds[2].service
    assert [service.low, service.high] == pytest.approx([0.3, 0.5])
    assert summary.restore == (20, 21, 22, 23)


def test_an_even_number_of_rounds_shows_the_lower_middle_round() -> None:
    rounds = [_round(1000, 500, 10), _round(1000, 300, 10)]
    assert summarize(rounds).paths[1].median is rounds[1].service


def test_bench_rounds_print_the_median_and_range_of_each_path(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(_cases.CASES, "default", _cases.Shape(4, 2, workers=2))
    assert main(["bench", "--case", "default", "--no-sync", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "default 4x2 on 2 threads, unsynced commits: median of 2 rounds (range)" in out
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert len(rows) == len(PATHS)
    assert rows[0].split("│")[-2].strip() == "1.00x"
    for row in rows[1:]:
        ratio, spread = row.split("│")[-2].split()
        low, high = (float(x) for x in spread.strip("()").split("-"))
        assert low <= float(ratio.rstrip("x")) <= high


def test_a_round_count_below_one_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["bench", "--case", "default", "--rounds", "0"])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "parlour bench: argument --rounds: must be at least 1, not 0 (see parlour bench --help)"
    ]
