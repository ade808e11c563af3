"""A process killed (``kill -9``) at any step of a turn keeps every step it acknowledged
before the kill exactly once (the user's message, each model answer, each finished tool
result), never runs a finished tool again, and leaves a conversation the next request
(a new message, or ``resume``) carries to the provider well paired and finishes.

The turn runs in a real child process on a real LmdbStore with the scripted model; the
child stops at a chosen step (a model reply that blocks, a tool that blocks, or a store
whose save blocks just before or just after it commits), prints where, and waits on its
stdin until the parent kills it. The recovery runs here, through the real Anthropic SDK
over its offline transport (the suite's conftest checks every body sent against the SDK's
request type). Each tool notes its start and its end in a file outside the store."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlour.actors import Agent, ConversationService
from parlour.runtime import Depth, OutputSize, dangling_calls, tool_from_function
from parlour.runtime.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.providers import AnthropicClient
from parlour.runtime.testing import MockProvider, anthropic_message, mock_anthropic_sdk
from parlour.stores import LmdbStore

USER = "alice"
QUESTION = "Please do the work."
FINAL = "Final answer."
RECOVERED = "Recovered."
TEXTS = {"question": QUESTION, "final": FINAL}

# The child. argv: the store's folder, the runs folder, and a JSON spec: "rounds" (per
# round, per parallel call, whether the call's tool raises) and "kill" (where to stop: a
# list, its kind first), or "resume" (a conversation id: resume it, stopping inside the
# first model call), and the user's "question" and the model's "final" answer. Round k's
# answer says "Round k." and calls tags rKcJ.
CHILD = textwrap.dedent(
    """
    import json
    import os
    import sys
    import threading
    from pathlib import Path

    from parlour.actors import Agent, ConversationService
    from parlour.runtime import Depth, OutputSize, ScriptedClient
    from parlour.runtime.blocks import TextBlock, ToolResultBlock, ToolUseBlock
    from parlour.runtime.testing import scripted_tool_calls
    from parlour.stores import LmdbStore

    data, runs, spec = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
    rounds, kill = spec["rounds"], spec.get("kill", ["none"])
    kind = kill[0]
    saved = threading.Condition()
    CID = []


    def stop_here(where):
        print("stopped " + where, flush=True)
        sys.stdin.readline()  # never answered: the parent kills this process here
        raise SystemExit("not killed")


    def blocks_of(snapshot):
        return [b for m in snapshot.messages for b in m.blocks]


    def results_of(snapshot, k):
        blocks = blocks_of(snapshot)
        tags = {
            b.id: json.loads(b.input_json)["tag"] for b in blocks if isinstance(b, ToolUseBlock)
        }
        return sum(
            isinstance(b, ToolResultBlock) and tags.get(b.tool_use_id, "").startswith(f"r{k}c")
            for b in blocks
        )


    def said(snapshot, text):
        return any(isinstance(b, TextBlock) and b.text == text for b in blocks_of(snapshot))


    class KillPoints(LmdbStore):
        def create_context(self, snapshot, user_id, caller=None):
            return self._after(snapshot, super().create_context(snapshot, user_id, caller))

        def save_context(self, snapshot, user_id, caller=None):
            if kind == "final" and said(snapshot, spec["final"]):
                stop_here("before the final answer's save")
            return self._after(snapshot, super().save_context(snapshot, user_id, caller))

        def _after(self, snapshot, version):
            k = kill[1] if len(kill) > 1 else -1
            if kind == "settled" and said(snapshot, f"Round {k}.") and not results_of(snapshot, k):
                stop_here("after the answer calling tools is saved")
            if kind == "between" and results_of(snapshot, k) >= kill[2]:
                stop_here("after a tool's result is saved")
            with saved:
                saved.notify_all()
            return version


    def note(tag, what):  # one write: a kill keeps the whole line or none of it
        fd = os.open(runs / tag, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            os.write(fd, (what + "\\n").encode())
        finally:
            os.close(fd)


    def run(tag):
        note(tag, "start")
        if kind == "tool" and tag == f"r{kill[1]}c{kill[2]}":
            others = len(rounds[kill[1]]) - 1
            with saved:  # the siblings' results are committed first: the kill keeps them
                assert saved.wait_for(
                    lambda: results_of(store.load(CID[0], "alice"), kill[1]) == others,
                    timeout=60,
                )
            stop_here("inside a tool")
        note(tag, "end")


    def work(tag: str) -> str:
        '''Do some work.

        Args:
            tag: which call this is.
        '''
        run(tag)
        return f"done {tag}"


    def fail(tag: str) -> str:
        '''Try some work that fails.

        Args:
            tag: which call this is.
        '''
        run(tag)
        raise RuntimeError(f"failed {tag}")


    def stopping(where):
        return lambda prepared: stop_here(where)


    replies = []
    for k, calls in enumerate(rounds):
        if kill == ["model", k]:
            replies.append(stopping("inside a model call"))
        else:
            named = [("fail" if f else "work", {"tag": f"r{k}c{j}"}) for j, f in enumerate(calls)]
            replies.append(scripted_tool_calls(*named, text=f"Round {k}."))
    if kill == ["model", len(rounds)]:
        replies.append(stopping("inside a model call"))
    replies.append(spec["final"])
    if "resume" in spec:
        replies = [stopping("inside the recovery's model call")]
    agent = Agent(
        ScriptedClient(replies),
        tools=[work, fail],
        output=OutputSize.COMPACT,
        depth=Depth.IMMEDIATE,
    )
    with KillPoints(data) as store, ConversationService(store) as service:
        if "resume" in spec:
            chat = agent.chat(service, user_id="alice", conversation_id=spec["resume"])
            CID.append(chat.conversation_id)
            print(chat.conversation_id, flush=True)
            chat.resume()
        else:
            chat = agent.chat(service, user_id="alice")
            CID.append(chat.conversation_id)
            print(chat.conversation_id, flush=True)
            chat.send(spec["question"])
    print("turn ended", flush=True)
    """
)

MARKERS = {
    "model": "stopped inside a model call",
    "settled": "stopped after the answer calling tools is saved",
    "tool": "stopped inside a tool",
    "between": "stopped after a tool's result is saved",
    "final": "stopped before the final answer's save",
}


@dataclass
class Killed:
    """A store whose turn was killed at ``kill``, the folder of the tools' run notes, the
    conversation, and the turn's shape (per round, per call, whether its tool raises)."""

    data: Path
    runs: Path
    conversation_id: str
    rounds: list[list[bool]]
    kill: list[Any]


def _kill_child(data: Path, runs: Path, spec: dict[str, Any], marker: str) -> str:
    """Run the child on ``spec`` until it prints ``marker``, kill it (SIGKILL), and return
    its conversation id."""
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data), str(runs), json.dumps(spec | TEXTS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None
        try:
            conversation_id = child.stdout.readline().strip()
            assert child.stdout.readline().strip() == marker
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    return conversation_id


def _killed(base: Path, rounds: list[list[bool]], kill: list[Any]) -> Killed:
    data, runs = base / "db", base / "runs"
    runs.mkdir(parents=True)
    spec = {"rounds": rounds, "kill": kill}
    conversation_id = _kill_child(data, runs, spec, MARKERS[kill[0]])
    return Killed(data, runs, conversation_id, rounds, kill)


def _kill_recovery(killed: Killed) -> None:
    """A first recovery, in another process, killed inside its model call while it resumes."""
    spec = {"rounds": killed.rounds, "resume": killed.conversation_id}
    marker = "stopped inside the recovery's model call"
    assert _kill_child(killed.data, killed.runs, spec, marker) == killed.conversation_id


# -- what the kill must have kept ---------------------------------------------------------------


def _tag(call: ToolUseBlock) -> str:
    return str(json.loads(call.input_json)["tag"])


def _acknowledged(killed: Killed) -> tuple[int, set[str]]:
    """How many answers calling tools, and which calls' results, were committed before the
    kill (the child stops only after these are saved)."""
    rounds, kill = killed.rounds, killed.kill
    kind, at = kill[0], (kill[1] if len(kill) > 1 else len(rounds))
    answers = at if kind in ("model", "final") else at + 1
    results = {f"r{k}c{j}" for k in range(min(at, len(rounds))) for j in range(len(rounds[k]))}
    if kind == "tool":
        results |= {f"r{at}c{j}" for j in range(len(rounds[at])) if j != kill[2]}
    return answers, results


def _results(stored: Any) -> list[ToolResultBlock]:
    return [b for m in stored.messages for b in m.blocks if isinstance(b, ToolResultBlock)]


def _runs(runs: Path, suffix: str = "") -> dict[str, list[str]]:
    """Each call's notes in the runs folder: the killed process's (no suffix: ``start``,
    then ``end`` when it finished), or the recovery's (``.rerun``: a line a run)."""
    notes = [p for p in runs.glob("r*" + suffix) if p.suffix == suffix]
    notes = [p for p in notes if p.stat().st_size]  # killed between creating it and writing
    return {p.stem: p.read_text().splitlines() for p in notes}


def _stored(data: Path, conversation_id: str) -> Any:
    with LmdbStore(data) as store:
        stored = store.load(conversation_id, USER)
    assert stored is not None
    return stored


def _assert_kept(killed: Killed, stored: Any, *, answered: bool) -> None:
    """Every acknowledged step is in ``stored`` exactly once, no call has two results, every
    result of a finished tool is its own, and no tool ran twice; ``answered``: every call
    has its result (a recovery answered the dangling ones)."""
    answers, acknowledged = _acknowledged(killed)
    blocks = [b for m in stored.messages for b in m.blocks]
    texts = [b.text for b in blocks if isinstance(b, TextBlock)]
    assert texts.count(QUESTION) == 1 and texts.count(FINAL) == 0
    for k in range(len(killed.rounds)):
        assert texts.count(f"Round {k}.") == (1 if k < answers else 0)
    tags = {b.id: _tag(b) for b in blocks if isinstance(b, ToolUseBlock)}
    assert len(tags) == sum(len(calls) for calls in killed.rounds[:answers])
    results = [b for b in blocks if isinstance(b, ToolResultBlock)]
    by_tag = {tags[r.tool_use_id]: r for r in results}
    assert len(by_tag) == len(results)  # at most one result a call
    runs, reruns = _runs(killed.runs), _runs(killed.runs, ".rerun")
    assert all(lines in (["start"], ["start", "end"]) for lines in runs.values())
    assert all(lines == ["run"] for lines in reruns.values())
    assert not (reruns.keys() & acknowledged)  # a call with a saved result never runs again
    for tag in acknowledged:
        assert runs[tag] == ["start", "end"]
    for tag, result in by_tag.items():
        finished = runs.get(tag) == ["start", "end"] or tag in reruns
        assert finished or result.is_error  # an unfinished call's result is the interruption
        if tag in reruns:
            assert (result.content, result.is_error) == (f"done {tag}", False)
        if tag in acknowledged:
            failing = killed.rounds[int(tag[1 : tag.index("c")])][int(tag[tag.index("c") + 1 :])]
            assert result.is_error == failing
            assert failing or result.content == f"done {tag}"
    assert acknowledged <= set(by_tag)
    assert (set(by_tag) == set(tags.values())) if answered else True
    kind = killed.kill[0]
    if kind == "settled":  # killed after the calls were saved, before any tool started
        assert not any(tag.startswith(f"r{killed.kill[1]}c") for tag in runs)
    if kind == "between":
        assert sum(t.startswith(f"r{killed.kill[1]}c") for t in by_tag) >= killed.kill[2]
    if kind == "tool":
        assert runs[f"r{killed.kill[1]}c{killed.kill[2]}"] == ["start"]


# -- the recovery --------------------------------------------------------------------------------


def _tools(runs: Path, *, rerun: bool) -> list[Any]:
    """The recovering process's tools; each run is noted in ``<tag>.rerun`` (only a call
    left without a result may run, and only when ``rerun``: ``work`` is then declared safe
    to run again)."""

    def note(tag: str) -> None:
        with open(runs / f"{tag}.rerun", "a") as f:
            f.write("run\n")

    def work(tag: str) -> str:
        """Do some work.

        Args:
            tag: which call this is.
        """
        note(tag)
        return f"done {tag}"

    def fail(tag: str) -> str:
        """Try some work that fails.

        Args:
            tag: which call this is.
        """
        note(tag)
        raise RuntimeError(f"failed {tag}")

    return [tool_from_function(work, rerun_on_recovery=rerun), fail]


def _assert_paired(body: dict[str, Any]) -> None:
    """Each tool call in ``body`` is answered first thing in the next message, once, and
    every result answers a call."""
    messages = body["messages"]
    answered: list[str] = []
    for at, message in enumerate(messages):
        content = message["content"] if isinstance(message["content"], list) else []
        calls = [b["id"] for b in content if b["type"] == "tool_use"]
        if message["role"] != "assistant" or not calls:
            continue
        following = messages[at + 1]
        assert following["role"] == "user"
        kinds = [b["type"] for b in following["content"]]
        results = [b["tool_use_id"] for b in following["content"] if b["type"] == "tool_result"]
        assert kinds[: len(results)] == ["tool_result"] * len(results)
        assert sorted(results) == sorted(calls)
        answered += results
    every = [
        b["tool_use_id"]
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    assert sorted(every) == sorted(answered)


def _recover(killed: Killed, copy: Path, go: str) -> None:
    """On a copy of the killed store, go on with ``go`` (a new message, or ``resume``; either
    recovers first, ``work`` declared safe to run again): the request pairs every call, the
    turn ends with the model's answer, nothing acknowledged is lost or doubled, and only the
    calls of ``work`` left without a result (or with the interrupted result an earlier
    recovery saved) run again."""
    shutil.copytree(killed.data, copy)
    before = _stored(copy, killed.conversation_id)
    interrupted = {
        r.tool_use_id for r in _results(before) if r.content.startswith("The call to work was")
    }
    dangling = [d.call for d in dangling_calls(before.messages)]
    calls = [b for m in before.messages for b in m.blocks if isinstance(b, ToolUseBlock)]
    reruns = {_tag(c) for c in dangling if c.name == "work"}
    reruns |= {_tag(c) for c in calls if c.id in interrupted}
    runs = _runs(killed.runs)
    server = MockProvider(anthropic_message(RECOVERED))
    model = AnthropicClient("claude-sonnet-4-5", client=mock_anthropic_sdk(server))
    tools = _tools(killed.runs, rerun=True)
    agent = Agent(model, tools=tools, output=OutputSize.COMPACT, depth=Depth.IMMEDIATE)
    with LmdbStore(copy) as store, ConversationService(store) as service:
        chat = agent.chat(service, user_id=USER, conversation_id=killed.conversation_id)
        assert chat.interrupted
        reply = chat.resume() if go == "resume" else chat.send("Hello again?")
        assert reply.text == RECOVERED
        assert not chat.interrupted
    # either way the turn says it picked up an interrupted one, and what it ran again
    assert reply.recovered is not None
    assert {_tag(c) for c in calls if c.id in reply.recovered.rerun} == reruns
    assert len(server.bodies) == 1
    _assert_paired(server.last_body)
    if go == "send":
        assert server.last_body["messages"][-1]["content"][-1] == {
            "type": "text",
            "text": "Hello again?",
        }
    stored = _stored(copy, killed.conversation_id)
    last = stored.messages[-1]
    assert last.role == "assistant" and [b.text for b in last.blocks] == [RECOVERED]
    assert dangling_calls(stored.messages) == []
    kept = {
        (r.tool_use_id, r.content, r.is_error)
        for r in _results(before)
        if r.tool_use_id not in interrupted
    }
    assert kept <= {(r.tool_use_id, r.content, r.is_error) for r in _results(stored)}
    _assert_kept(killed, stored, answered=True)
    assert _runs(killed.runs) == runs  # the killed process's notes: nothing ran as it
    assert _runs(killed.runs, ".rerun").keys() == reruns
    for path in killed.runs.glob("*.rerun"):
        path.unlink()  # the next recovery starts from the kill again


def _check(killed: Killed, tmp_path: Path) -> None:
    _assert_kept(killed, _stored(killed.data, killed.conversation_id), answered=False)
    _recover(killed, tmp_path / "sent", "send")
    _recover(killed, tmp_path / "resumed", "resume")


# -- each step ----------------------------------------------------------------------------------

# two rounds: three parallel calls (the second raising), then one
SHAPE = [[False, True, False], [False]]
STEPS = {
    "inside the first model call": ["model", 0],
    "after the answer calling tools is saved, before any tool starts": ["settled", 0],
    "inside one of several parallel tools": ["tool", 0, 2],
    "after a tool's result is saved, before its siblings finish": ["between", 0, 1],
    "after every result of a round is saved, before the round ends": ["between", 0, 3],
    "inside the second model call": ["model", 1],
    "inside the last model call": ["model", 2],
    "during the final answer's save": ["final"],
}


@pytest.mark.parametrize("kill", list(STEPS.values()), ids=list(STEPS))
def test_a_turn_killed_at_any_step_keeps_what_it_acknowledged_once_and_recovers(
    tmp_path: Path, kill: list[Any]
) -> None:
    _check(_killed(tmp_path / "killed", SHAPE, kill), tmp_path)


def test_a_recovery_killed_while_it_resumes_leaves_a_conversation_the_next_one_finishes(
    tmp_path: Path,
) -> None:
    killed = _killed(tmp_path / "killed", SHAPE, ["tool", 0, 2])
    _kill_recovery(killed)
    stored = _stored(killed.data, killed.conversation_id)
    # the resume saved the restore's interrupted answer before its model call
    _assert_kept(killed, stored, answered=True)
    assert stored.turn is not None and stored.turn.open
    _check(killed, tmp_path)


# -- any shape, any step ------------------------------------------------------------------------


@st.composite
def _turns_and_kills(draw: st.DrawFn) -> tuple[list[list[bool]], list[Any], bool]:
    """A turn shape (0-3 rounds of 1-3 parallel calls, some raising), a step to kill it at,
    and whether a first recovery is killed too."""
    rounds = draw(st.lists(st.lists(st.booleans(), min_size=1, max_size=3), max_size=3))
    steps: list[list[Any]] = [["model", k] for k in range(len(rounds) + 1)] + [["final"]]
    for k, calls in enumerate(rounds):
        steps.append(["settled", k])
        steps += [["tool", k, j] for j in range(len(calls))]
        steps += [["between", k, m] for m in range(1, len(calls) + 1)]
    return rounds, draw(st.sampled_from(steps)), draw(st.booleans())


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(case=_turns_and_kills())
def test_any_turn_killed_at_any_step_keeps_what_it_acknowledged_once_and_recovers(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[list[list[bool]], list[Any], bool]
) -> None:
    rounds, kill, kill_recovery_too = case
    base = tmp_path_factory.mktemp("kill")
    killed = _killed(base / "killed", rounds, kill)
    if kill_recovery_too:
        _kill_recovery(killed)
        # killed in its model call: it had saved what the restore repaired
        _assert_kept(killed, _stored(killed.data, killed.conversation_id), answered=True)
    _check(killed, base)
