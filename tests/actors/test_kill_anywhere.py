"""A process killed (``kill -9``) at any step of a turn keeps every step it acknowledged
before the kill exactly once (the user's message, each model answer, each finished tool
result), never runs a finished tool again, and leaves a conversation the next request
(a new message, or ``resume``) carries to the provider well paired and finishes.

The turn runs in a real child process on a real store (LMDB, or PostgreSQL when
``PARLOUR_TEST_POSTGRES`` names a server), its model a real provider SDK (Anthropic, OpenAI,
or boto3's Bedrock) over its offline transport; the child stops at a chosen step (a model
call whose stream stalls half-way, a tool that blocks, or a store whose save blocks just
before or just after it commits), prints where, and waits on its stdin until the parent
kills it. The recovery runs here, through the same provider's SDK (the suite's conftest
checks every Anthropic and OpenAI body sent against the SDK's request type; boto3 validates
Bedrock's parameters before it serializes them). Each tool notes its start and its end in a
file outside the store.

Why this module is long: one child program, the acknowledged-steps check and the three
providers' pairing rules serve every step, store and provider; split, each piece would be
imported by the others.
"""

from __future__ import annotations

import itertools
import json
import shutil
import textwrap
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.actors import Agent, ConversationService
from parlour.runtime import Depth, LLMClient, OutputSize, dangling_calls, tool_from_function
from parlour.runtime.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.providers import AnthropicClient, OpenAIClient, parse_tool_calls
from parlour.runtime.testing import (
    ConverseStreamMock,
    MockProvider,
    anthropic_message,
    converse_stream_events,
    dummy_bedrock_client,
    mock_anthropic_sdk,
    mock_openai_sdk,
    openai_completion,
)
from parlour.stores import LmdbStore, PostgresStore

from .kills import PROVIDERS, bedrock_model, killed_after, postgres_schema

USER = "alice"
QUESTION = "Please do the work."
FINAL = "Final answer."
RECOVERED = "Recovered."
TEXTS = {"question": QUESTION, "final": FINAL}
STORES = ("lmdb", "postgres")

# The child. argv: the store's kind (lmdb, postgres) and place (a folder, a conninfo), the
# runs folder, and a JSON spec: "provider" (the SDK its model speaks through), "driver"
# (send, stream, astream), "rounds" (per round, per parallel call, whether the call's tool
# raises) and "kill" (where to stop: a list, its kind first), or "resume" (a conversation
# id: resume it, stopping inside the first model call), and the user's "question" and the
# model's "final" answer. Round k's answer says "Round k." and calls tags rKcJ. A model call
# is stopped mid-stream: half its events are sent, then none; a stream driver prints each
# text delta it got ("delta <text>") before that.
CHILD = textwrap.dedent(
    """
    import asyncio
    import json
    import os
    import sys
    import threading
    from pathlib import Path

    from parlour.actors import Agent, ConversationService, TextDelta
    from parlour.runtime import Depth, OutputSize
    from parlour.runtime.blocks import TextBlock, ToolResultBlock, ToolUseBlock
    from tests.actors.kills import Answer, Shown, say, sdk_model, stop_here, store_class

    kind, where, runs = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    spec = json.loads(sys.argv[4])
    rounds, kill = spec["rounds"], spec.get("kill", ["none"])
    saved = threading.Condition()
    CID = []


    def blocks_of(snapshot):
        return [b for m in snapshot.messages for b in m.blocks]


    def results_of(snapshot, k):
        tags, found = {}, 0  # a result answers a call of the last message with calls
        for message in snapshot.messages:
            calls = [b for b in message.blocks if isinstance(b, ToolUseBlock)]
            if calls:
                tags = {b.id: json.loads(b.input_json)["tag"] for b in calls}
            for b in message.blocks:
                if isinstance(b, ToolResultBlock):
                    found += tags.get(b.tool_use_id, "").startswith(f"r{k}c")
        return found


    def said(snapshot, text):
        blocks = blocks_of(snapshot)
        return any(isinstance(b, TextBlock) and b.text.startswith(text) for b in blocks)


    class KillPoints(store_class(kind)):
        def create_context(self, snapshot, user_id, caller=None):
            return self._after(snapshot, super().create_context(snapshot, user_id, caller))

        def save_context(self, snapshot, user_id, caller=None):
            if kill[0] == "final" and said(snapshot, spec["final"]):
                stop_here("before the final answer's save")
            return self._after(snapshot, super().save_context(snapshot, user_id, caller))

        def append_context(self, appended, user_id, caller=None):  # what LMDB's turns do
            if kill[0] == "final" and said(appended, spec["final"]):  # its new messages
                stop_here("before the final answer's save")
            version = super().append_context(appended, user_id, caller)
            return self._after(self.load(appended.conversation_id, user_id), version)
        def create_context_async(self, snapshot, user_id, caller=None):
            return self._later(snapshot, super().create_context_async(snapshot, user_id, caller))

        def save_context_async(self, snapshot, user_id, caller=None):
            if kill[0] == "final" and said(snapshot, spec["final"]):
                stop_here("before the final answer's save")
            return self._later(snapshot, super().save_context_async(snapshot, user_id, caller))

        async def _later(self, snapshot, saving):  # the async driver's saves (asend, astream)
            return self._after(snapshot, await saving)

        def append_context_async(self, appended, user_id, caller=None):
            if kill[0] == "final" and said(appended, spec["final"]):
                stop_here("before the final answer's save")
            saving = super().append_context_async(appended, user_id, caller)
            return self._appended_later(appended, user_id, saving)

        async def _appended_later(self, appended, user_id, saving):
            version = await saving
            return self._after(self.load(appended.conversation_id, user_id), version)

        def _after(self, snapshot, version):
            k = kill[1] if len(kill) > 1 else -1
            settled = said(snapshot, f"Round {k}.") and not results_of(snapshot, k)
            if kill[0] == "settled" and settled:
                stop_here("after the answer calling tools is saved")
            if kill[0] == "between" and results_of(snapshot, k) >= kill[2]:
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
        if kill[0] == "tool" and tag == f"r{kill[1]}c{kill[2]}":
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


    def answer(k, calls):
        tags = [f"r{k}c{j}" for j in range(len(calls))]
        named = [(t, "fail" if f else "work", {"tag": t}) for t, f in zip(tags, calls)]
        return Answer(f"Round {k}.", named)


    answers = [answer(k, calls) for k, calls in enumerate(rounds)] + [Answer(spec["final"])]
    stall_at, stall = (kill[1], "inside a model call") if kill[0] == "model" else (None, "")
    if "resume" in spec:
        answers, stall_at, stall = [Answer(spec["final"])], 0, "inside the recovery's model call"
    shown = Shown() if spec.get("driver") in ("stream", "astream") else None
    model = sdk_model(spec["provider"], answers, stall_at=stall_at, where=stall, shown=shown)
    agent = Agent(model, tools=[work, fail], output=OutputSize.COMPACT, depth=Depth.IMMEDIATE)


    def show(event):
        if isinstance(event, TextDelta):
            say("delta " + event.text)
            shown.one()


    async def astream(chat):
        async for event in chat.astream(spec["question"]):
            show(event)


    with KillPoints(where) as store, ConversationService(store) as service:
        chat = agent.chat(service, user_id="alice", conversation_id=spec.get("resume"))
        CID.append(chat.conversation_id)
        say(chat.conversation_id)
        if "resume" in spec:
            chat.resume()
        elif spec["driver"] == "send":
            chat.send(spec["question"])
        elif spec["driver"] == "stream":
            for event in chat.stream(spec["question"]):
                show(event)
        else:
            asyncio.run(astream(chat))
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
    """A store (``kind`` at ``where``) whose turn, through ``provider``, was killed at
    ``kill``; the folder of the tools' run notes; the conversation; the turn's shape (per
    round, per call, whether its tool raises); the text deltas the child had streamed."""

    kind: str
    where: str
    runs: Path
    conversation_id: str
    provider: str
    rounds: list[list[bool]]
    kill: list[Any]
    deltas: list[str]


class Places:
    """Fresh places for a store of ``kind``: folders under ``base`` for LMDB, schemas
    (dropped when ``stack`` closes) on the test server for PostgreSQL."""

    def __init__(self, kind: str, base: Path, stack: ExitStack) -> None:
        self.kind, self.base, self.stack = kind, base, stack
        self.made = 0

    def fresh(self) -> tuple[str, Path]:
        """A new empty store place, and a new runs folder."""
        self.made += 1
        runs = self.base / f"runs{self.made}"
        runs.mkdir(parents=True)
        if self.kind == "lmdb":
            return str(self.base / f"db{self.made}"), runs
        return self.stack.enter_context(postgres_schema()), runs

    def copy(self, killed: Killed) -> Killed:
        """A copy of an LMDB store ``killed`` left, its runs folder copied too."""
        where, runs = self.fresh()
        shutil.copytree(killed.where, where)
        shutil.copytree(killed.runs, runs, dirs_exist_ok=True)
        return replace(killed, where=where, runs=runs)


@pytest.fixture
def places(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Places]:
    """Places for the store the test's ``store`` parameter names."""
    with ExitStack() as stack:
        yield Places(request.getfixturevalue("store"), tmp_path, stack)


def _killed(
    places: Places, provider: str, rounds: list[list[bool]], kill: list[Any], driver: str = "send"
) -> Killed:
    """A turn of ``rounds`` through ``provider``, driven by ``driver``, killed at ``kill``."""
    where, runs = places.fresh()
    spec = {"rounds": rounds, "kill": kill, "provider": provider, "driver": driver} | TEXTS
    args = [places.kind, where, str(runs), json.dumps(spec)]
    conversation_id, *said = killed_after(CHILD, args, MARKERS[kill[0]])
    deltas = [line.removeprefix("delta ") for line in said]
    return Killed(places.kind, where, runs, conversation_id, provider, rounds, kill, deltas)


def _kill_recovery(killed: Killed) -> None:
    """A first recovery, in another process, killed inside its model call while it resumes."""
    spec = {"rounds": killed.rounds, "resume": killed.conversation_id}
    spec |= {"provider": killed.provider} | TEXTS
    args = [killed.kind, killed.where, str(killed.runs), json.dumps(spec)]
    marker = "stopped inside the recovery's model call"
    assert killed_after(CHILD, args, marker)[0] == killed.conversation_id


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


def _paired(stored: Any) -> tuple[list[str], list[tuple[str, ToolResultBlock]]]:
    """The tags of ``stored`` 's calls, and each result with its call's tag: a result
    answers the call of that id in the last message with calls before it (Bedrock's calls
    are numbered ``name#position`` within their message, so an id comes back each round)."""
    calls: dict[str, str] = {}
    tags: list[str] = []
    results: list[tuple[str, ToolResultBlock]] = []
    for message in stored.messages:
        uses = [b for b in message.blocks if isinstance(b, ToolUseBlock)]
        if uses:
            calls = {b.id: _tag(b) for b in uses}
            tags += calls.values()
        results += [
            (calls[b.tool_use_id], b) for b in message.blocks if isinstance(b, ToolResultBlock)
        ]
    return tags, results


def _results(stored: Any) -> list[ToolResultBlock]:
    return [b for m in stored.messages for b in m.blocks if isinstance(b, ToolResultBlock)]


def _runs(runs: Path, suffix: str = "") -> dict[str, list[str]]:
    """Each call's notes in the runs folder: the killed process's (no suffix: ``start``,
    then ``end`` when it finished), or the recovery's (``.rerun``: a line a run)."""
    notes = [p for p in runs.glob("r*" + suffix) if p.suffix == suffix]
    notes = [p for p in notes if p.stat().st_size]  # killed between creating it and writing
    return {p.stem: p.read_text().splitlines() for p in notes}


def _stored(killed: Killed) -> Any:
    with _open(killed.kind, killed.where) as store:
        stored = store.load(killed.conversation_id, USER)
    assert stored is not None
    return stored


def _open(kind: str, where: str) -> LmdbStore | PostgresStore:
    return LmdbStore(where) if kind == "lmdb" else PostgresStore(where)


def _assert_kept(killed: Killed, stored: Any, *, answered: bool) -> None:
    """Every acknowledged step is in ``stored`` exactly once, no call has two results, every
    result of a finished tool is its own, and no tool ran twice; ``answered``: every call
    has its result (a recovery answered the dangling ones)."""
    answers, acknowledged = _acknowledged(killed)
    blocks = [b for m in stored.messages for b in m.blocks]
    texts = [b.text for b in blocks if isinstance(b, TextBlock)]
    assert texts.count(QUESTION) == 1 and texts.count(FINAL) == 0
    for k in range(len(killed.rounds)):  # Bedrock's text carries the calls after it
        assert sum(t.startswith(f"Round {k}.") for t in texts) == (1 if k < answers else 0)
    tags, results = _paired(stored)
    assert len(set(tags)) == len(tags) == sum(len(calls) for calls in killed.rounds[:answers])
    by_tag = dict(results)
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
    assert (set(by_tag) == set(tags)) if answered else True
    kind = killed.kill[0]
    if kind == "settled":  # killed after the calls were saved, before any tool started
        assert not any(tag.startswith(f"r{killed.kill[1]}c") for tag in runs)
    if kind == "between":
        assert sum(t.startswith(f"r{killed.kill[1]}c") for t in by_tag) >= killed.kill[2]
    if kind == "tool":
        assert runs[f"r{killed.kill[1]}c{killed.kill[2]}"] == ["start"]


# -- each provider's pairing rules --------------------------------------------------------------


def _paired_anthropic(body: dict[str, Any], go: str) -> None:
    """Each tool call is answered first thing in the next (user) message, once, and every
    result answers a call."""
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
    if go == "send":
        assert messages[-1]["content"][-1] == {"type": "text", "text": "Hello again?"}


def _paired_openai(body: dict[str, Any], go: str) -> None:
    """Each assistant message with tool calls is followed by one ``tool`` message per call,
    and a ``tool`` message appears nowhere else."""
    messages = [m for m in body["messages"] if m["role"] not in ("system", "developer")]
    answered = 0
    for at, message in enumerate(messages):
        calls = [c["id"] for c in message.get("tool_calls") or []]
        if message["role"] != "assistant" or not calls:
            continue
        following = messages[at + 1 : at + 1 + len(calls)]
        assert [m["role"] for m in following] == ["tool"] * len(calls)
        assert sorted(m["tool_call_id"] for m in following) == sorted(calls)
        answered += len(calls)
    assert sum(m["role"] == "tool" for m in messages) == answered
    if go == "send":
        assert messages[-1]["role"] == "user"
        content = messages[-1]["content"]
        said = content if isinstance(content, str) else content[-1]["text"]
        assert said == "Hello again?"


def _paired_bedrock(body: dict[str, Any], go: str) -> None:
    """Roles alternate from a user message; the calls in an assistant's text envelope are
    answered (``Tool result for <id>`` / ``Tool error for <id>``) first thing in the next
    message, once each, and no result answers nothing."""
    messages = body["messages"]
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"] * (len(roles) % 2)
    texts = [[c.get("text", "") for c in m["content"]] for m in messages]
    answered = 0
    for at, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        calls = [c.id for c in parse_tool_calls("".join(texts[at]))]
        heads = texts[at + 1][: len(calls)]
        ids = [
            h.split(":")[0].removeprefix("Tool result for ").removeprefix("Tool error for ")
            for h in heads
        ]
        assert sorted(ids) == sorted(calls)
        answered += len(calls)
    every = [t for ts in texts for t in ts if t.startswith(("Tool result for", "Tool error for"))]
    assert len(every) == answered
    if go == "send":
        assert messages[-1]["content"][-1] == {"text": "Hello again?"}


PAIRED: dict[str, Callable[[dict[str, Any], str], None]] = {
    "anthropic": _paired_anthropic,
    "bedrock": _paired_bedrock,
    "openai": _paired_openai,
}


def _recovery_model(provider: str) -> tuple[LLMClient, list[dict[str, Any]]]:
    """``provider`` 's client answering ``RECOVERED`` once, and the bodies it will send."""
    if provider == "bedrock":
        boto = dummy_bedrock_client()
        mock = ConverseStreamMock(boto, converse_stream_events(RECOVERED))
        return bedrock_model(boto), mock.bodies
    if provider == "anthropic":
        server = MockProvider(anthropic_message(RECOVERED))
        model: LLMClient = AnthropicClient("claude-sonnet-4-5", client=mock_anthropic_sdk(server))
        return model, server.bodies
    server = MockProvider(openai_completion(RECOVERED))
    return OpenAIClient("gpt-5-mini", client=mock_openai_sdk(server)), server.bodies


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


def _interrupted_calls(messages: list[Any]) -> list[ToolUseBlock]:
    """The calls whose stored result is the interrupted one an earlier recovery saved, each
    paired with its result within its own round (Bedrock's ids repeat across rounds)."""
    found = []
    for asked, answered in itertools.pairwise(messages):
        calls = {b.id: b for b in asked.blocks if isinstance(b, ToolUseBlock)}
        found += [
            calls[r.tool_use_id]
            for r in answered.blocks
            if isinstance(r, ToolResultBlock)
            and r.tool_use_id in calls
            and r.content.startswith("The call to work was interrupted")
        ]
    return found


def _recover(killed: Killed, go: str) -> None:
    """Go on with ``go`` (a new message, or ``resume``; either recovers first, ``work``
    declared safe to run again) on the store ``killed`` left: the request pairs every call,
    the turn ends with the model's answer, nothing acknowledged is lost or doubled, only the
    calls of ``work`` left without a result (or with the interrupted result an earlier
    recovery saved) run again, and the reply says what the recovery did."""
    before = _stored(killed)
    dangling = [d.call for d in dangling_calls(before.messages)]
    interrupted = _interrupted_calls(before.messages)
    reruns = {_tag(c) for c in dangling if c.name == "work"} | {_tag(c) for c in interrupted}
    runs = _runs(killed.runs)
    model, bodies = _recovery_model(killed.provider)
    tools = _tools(killed.runs, rerun=True)
    agent = Agent(model, tools=tools, output=OutputSize.COMPACT, depth=Depth.IMMEDIATE)
    with _open(killed.kind, killed.where) as store, ConversationService(store) as service:
        chat = agent.chat(service, user_id=USER, conversation_id=killed.conversation_id)
        assert chat.interrupted
        reply = chat.resume() if go == "resume" else chat.send("Hello again?")
        assert reply.text == RECOVERED
        assert not chat.interrupted
    # either way the turn says it picked up an interrupted one
    assert reply.recovered is not None
    assert len(bodies) == 1
    PAIRED[killed.provider](bodies[0], go)
    stored = _stored(killed)
    last = stored.messages[-1]
    assert last.role == "assistant" and [b.text for b in last.blocks] == [RECOVERED]
    assert dangling_calls(stored.messages) == []
    kept = {
        (r.tool_use_id, r.content, r.is_error)
        for r in _results(before)
        if not r.content.startswith("The call to work was interrupted")
    }
    assert kept <= {(r.tool_use_id, r.content, r.is_error) for r in _results(stored)}
    _assert_kept(killed, stored, answered=True)
    assert _runs(killed.runs) == runs  # the killed process's notes: nothing ran as it
    assert _runs(killed.runs, ".rerun").keys() == reruns


def _check(places: Places, kill: Callable[[], Killed]) -> Killed:
    """Kill a turn with ``kill``, check what it kept, and recover it by a new message and
    by ``resume``, each on its own copy (PostgreSQL: a turn killed again the same way)."""
    killed = kill()
    _assert_kept(killed, _stored(killed), answered=False)
    _recover(places.copy(killed) if places.kind == "lmdb" else killed, "send")
    _recover(places.copy(killed) if places.kind == "lmdb" else kill(), "resume")
    return killed


# -- each step, each provider, each store -------------------------------------------------------

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


def _matrix() -> list[Any]:
    """Every provider on every store; all but Anthropic on LMDB run only with the slow ones."""
    cases = [(p, s) for p in PROVIDERS for s in STORES]
    return [
        pytest.param(p, s, id=f"{p}-{s}", marks=[] if (p, s) == cases[0] else [pytest.mark.slow])
        for p, s in cases
    ]


@pytest.mark.parametrize(("provider", "store"), _matrix())
@pytest.mark.parametrize("kill", list(STEPS.values()), ids=list(STEPS))
def test_a_turn_killed_at_any_step_keeps_what_it_acknowledged_once_and_recovers(
    places: Places, provider: str, store: str, kill: list[Any]
) -> None:
    _check(places, lambda: _killed(places, provider, SHAPE, kill))


@pytest.mark.parametrize(("provider", "store"), _matrix())
def test_a_recovery_killed_while_it_resumes_leaves_a_conversation_the_next_one_finishes(
    places: Places, provider: str, store: str
) -> None:
    def kill() -> Killed:
        killed = _killed(places, provider, SHAPE, ["tool", 0, 2])
        _kill_recovery(killed)
        stored = _stored(killed)
        # the resume saved the restore's interrupted answer before its model call
        _assert_kept(killed, stored, answered=True)
        assert stored.turn is not None and stored.turn.open
        return killed

    _check(places, kill)


# -- the async driver's saves ------------------------------------------------------------------

ASYNC_SAVES = {
    "after the answer calling tools is saved": ["settled", 0],
    "after a tool's result is saved, before its siblings finish": ["between", 0, 1],
    "during the final answer's save": ["final"],
}


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("kill", list(ASYNC_SAVES.values()), ids=list(ASYNC_SAVES))
def test_an_async_turn_killed_right_after_a_save_returns_keeps_that_step(
    places: Places, store: str, kill: list[Any]
) -> None:
    """``astream`` saves on the loop (the commit in the store's commit thread): the step a
    save acknowledged is on disk when the process is killed the moment it returns."""
    _check(places, lambda: _killed(places, "anthropic", SHAPE, kill, "astream"))


# -- a streamed model call, killed half-way ----------------------------------------------------

STREAMED = {
    "in the first model call": ["model", 0],
    "in the model call after a round of tools": ["model", 1],
}


@pytest.mark.slow
@pytest.mark.parametrize("store", ["lmdb"])
@pytest.mark.parametrize("driver", ["stream", "astream"])
@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize("kill", list(STREAMED.values()), ids=list(STREAMED))
def test_a_turn_killed_while_its_answer_streams_keeps_no_part_of_it_and_recovers(
    places: Places, provider: str, driver: str, store: str, kill: list[Any]
) -> None:
    shape = [[False, False]]
    killed = _check(places, lambda: _killed(places, provider, shape, kill, driver))
    before = "".join(f"Round {k}." for k in range(kill[1]))  # the answers streamed whole
    said = "".join(killed.deltas)
    assert said.startswith(before)
    half = said.removeprefix(before)  # the stalled answer's first piece reached the caller
    unsaid = f"Round {kill[1]}." if kill[1] < len(shape) else FINAL
    assert half and unsaid.startswith(half) and half != unsaid
    stored = _stored(killed)
    texts = [b.text for m in stored.messages for b in m.blocks if isinstance(b, TextBlock)]
    assert not any(t.startswith(half) for t in texts)  # no half answer is kept


# -- any shape, any step ------------------------------------------------------------------------


@st.composite
def _turns_and_kills(draw: st.DrawFn) -> tuple[list[list[bool]], list[Any], bool, str]:
    """A turn shape (0-5 rounds of 1-4 parallel calls, some raising), a step to kill it at,
    whether a first recovery is killed too, and the provider."""
    rounds = draw(st.lists(st.lists(st.booleans(), min_size=1, max_size=4), max_size=5))
    steps: list[list[Any]] = [["model", k] for k in range(len(rounds) + 1)] + [["final"]]
    for k, calls in enumerate(rounds):
        steps.append(["settled", k])
        steps += [["tool", k, j] for j in range(len(calls))]
        steps += [["between", k, m] for m in range(1, len(calls) + 1)]
    kill = draw(st.sampled_from(steps))
    return rounds, kill, draw(st.booleans()), draw(st.sampled_from(PROVIDERS))


def _any_turn(base: Path, store: str, case: tuple[list[list[bool]], list[Any], bool, str]) -> None:
    rounds, step, kill_recovery_too, provider = case
    with ExitStack() as stack:
        places = Places(store, base, stack)

        def kill() -> Killed:
            killed = _killed(places, provider, rounds, step)
            if kill_recovery_too:
                _kill_recovery(killed)
                # killed in its model call: it had saved what the restore repaired
                _assert_kept(killed, _stored(killed), answered=True)
            return killed

        _check(places, kill)


# Sized for CI: an example costs about 2 s of CPU on LMDB and 3 s on PostgreSQL (killed
# twice there, one recovery each), so the two tests take about 50 s and 30 s on an idle
# runner (100 s and 85 s measured on two cores shared with other work).
@pytest.mark.slow
@pytest.mark.timeout(600)  # the examples together: each one's processes have their own limit
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_turns_and_kills())
def test_any_turn_killed_at_any_step_on_lmdb_keeps_what_it_acknowledged_once_and_recovers(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[list[list[bool]], list[Any], bool, str]
) -> None:
    _any_turn(tmp_path_factory.mktemp("kill"), "lmdb", case)


@pytest.mark.slow
@pytest.mark.timeout(600)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_turns_and_kills())
def test_any_turn_killed_at_any_step_on_postgresql_keeps_what_it_acknowledged_and_recovers(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[list[list[bool]], list[Any], bool, str]
) -> None:
    _any_turn(tmp_path_factory.mktemp("kill"), "postgres", case)
