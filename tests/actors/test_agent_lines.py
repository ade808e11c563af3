"""The two-tool durable agent of benchmarks/agent_lines runs, resumes after a restart, and
is no longer than the same agent in Pydantic AI."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

import parlour.runtime
from parlour.runtime import LLMClient, ScriptedClient
from parlour.stores import LmdbStore

from .agent_helpers import calls, stored_results

LINES = Path(__file__).resolve().parents[2] / "benchmarks" / "agent_lines"


def test_the_two_tool_agent_uses_both_tools_across_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script: list[Any] = [
        calls(("get_weather", {"city": "Paris"})),
        "Sunny.",
        calls(("get_time", {"city": "Paris"})),
        "Noon.",
    ]

    def client_for(model: Any, **kwargs: Any) -> LLMClient:
        return ScriptedClient(script)

    monkeypatch.setattr(parlour.runtime, "client_for", client_for)
    monkeypatch.chdir(tmp_path)
    module = runpy.run_path(str(LINES / "parlour_agent.py"), run_name="agent_lines")
    cid = module["session"]("What is the weather in Paris?")
    assert module["session"]("And what time is it there?", cid) == cid  # a fresh service and store
    assert capsys.readouterr().out.splitlines() == ["Sunny.", "Noon."]
    with LmdbStore(tmp_path / "agent-data") as store:
        snapshot = store.load(cid, "alice")
    assert snapshot is not None
    assert [r.content for r in stored_results(snapshot)] == ["Sunny in Paris.", "12:00 in Paris."]


def test_the_parlour_agent_is_no_longer_than_the_pydantic_ai_one() -> None:
    count = runpy.run_path(str(LINES / "count.py"), run_name="count")["code_lines"]
    assert count(LINES / "parlour_agent.py") <= count(LINES / "pydantic_ai_agent.py")
