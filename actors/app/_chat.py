"""``parlour chat``: an interactive chat with the agent, streaming each answer as it arrives.

The scripted model by default (offline), a real one with ``--model`` when its key is set
(``ModelChoice``: with ``--base-url``, any model of an OpenAI-compatible server);
conversations are durable in ``--data-dir`` and ``--resume ID`` continues one (refused at
start when the user holds no such conversation there), showing its last few turns. An
empty line, ``/quit`` or end of input ends the chat; Ctrl-C too, with status 130; every
finished turn is already saved. A resumed conversation whose last turn was interrupted
says so, and ``/resume`` finishes it. On a terminal, readline edits the line and keeps
this session's history (the arrow keys).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import msgspec

from parlour.runtime import Depth, LLMClient, ModelCatalog, ModelSpec, OutputSize, client_for
from parlour.runtime.errors import ParlourError, UncorrectableLLMError
from parlour.stores import LmdbStore, MemorySessionCache

from .._service import ConversationService
from ..agent._agent import Agent
from ..agent._chat import Chat
from ..agent._events import TextDelta, ToolCallFinished, ToolCallStarted, TurnDone
from ..agent._history import HistoryMessage
from ._guard import AdminError, existing_store, store_dir
from ._workload import get_current_time

OBJECTIVE = "You are a helpful assistant. Answer briefly; use tools when they help."
CHAT_HELP = (
    "Chat with the agent, streaming its answers. An empty line, /quit or end of input "
    "(Ctrl-D) ends the chat, as does Ctrl-C (status 130); every finished turn is saved. "
    "--resume ID continues a stored conversation (parlour list USER lists them); /resume "
    "finishes its last turn when that was interrupted. A call waiting for approval "
    "(--needs-approval TOOL) is asked y/n, with a reason on n."
)
SHOWN_TURNS = 6  # the messages of a resumed conversation shown before the prompt


DEFAULT_CONTEXT_WINDOW = 32_768  # a model outside the catalog, served at --base-url


class ModelChoice(msgspec.Struct, frozen=True):
    """The model a command runs (``--model``, ``--base-url``, ``--context-window``): a
    catalog id, the offline ``scripted`` one by default; with ``base_url``, any model of an
    OpenAI-compatible server (Ollama, vLLM, llama.cpp), declared from its context window
    when the catalog does not know it."""

    model: str = "scripted"
    base_url: str | None = None
    context_window: int | None = None


def model_client(choice: ModelChoice) -> LLMClient:
    """The client of ``choice``; each refusal (unknown model, missing key or SDK, a base URL
    that does not parse) as one line.

    Raises:
        AdminError: the choice does not name a model parlour can reach.
    """
    if choice.base_url is None and choice.context_window is not None:
        raise AdminError("--context-window declares a model served at --base-url; give both.")
    if choice.base_url is not None and choice.model == "scripted":
        raise AdminError("--base-url needs --model NAME: the model the server is to run.")
    try:
        if choice.base_url is None:
            return client_for(choice.model)
        return client_for(_served_spec(choice), base_url=choice.base_url)
    except (ValueError, ImportError, UncorrectableLLMError) as exc:
        raise AdminError(str(exc)) from None


def _served_spec(choice: ModelChoice) -> ModelSpec:
    """The catalog's entry for the model, else one declared from its context window."""
    catalog = ModelCatalog.default()
    if choice.context_window is None and choice.model in {s.id for s in catalog}:
        return catalog.get(choice.model)
    window = choice.context_window or DEFAULT_CONTEXT_WINDOW
    return ModelSpec.custom(choice.model, context_window=window, provider="openai")


def run_chat(
    data_dir: Path,
    user: str,
    resume: str | None,
    model: ModelChoice,
    needs_approval: Sequence[str] = (),
) -> int:
    """The interactive loop; returns the exit status. A call of a tool in
    ``needs_approval`` waits for the person's y/n (a reason with n), as do the pending
    calls of a resumed conversation.

    Raises:
        AdminError: an unknown model, a model without its key or SDK, a data dir that is
            a file, ``needs_approval`` naming no tool of the chat, or (``resume``) no store
            or no conversation ``resume`` of ``user``.
        PermissionError: ``resume`` is another user's conversation.
        KeyboardInterrupt: Ctrl-C (the service stops cleanly first).
    """
    client = model_client(model)
    try:
        agent = Agent(
            client,
            tools=[get_current_time],
            objective=OBJECTIVE,
            output=OutputSize.STANDARD,
            depth=Depth.IMMEDIATE,
            needs_approval=set(needs_approval),
        )
    except ValueError as exc:  # a tool name the chat does not have
        raise AdminError(str(exc)) from None
    if resume is not None:
        existing_store(data_dir)  # a mistyped --data-dir is refused, not created
    else:
        store_dir(data_dir)
    with LmdbStore(data_dir) as store, ConversationService(store, MemorySessionCache()) as service:
        if resume is not None and store.load(resume, user) is None:  # another's: PermissionError
            raise AdminError(
                f"User {user} has no conversation {resume} in {data_dir}: parlour list {user} "
                "lists theirs."
            )
        chat = agent.chat(service, user_id=user, conversation_id=resume)
        print(
            f"conversation {chat.conversation_id} ({client.model_id}); resume it with "
            f"--resume {chat.conversation_id}; an empty line ends the chat"
        )
        if resume is not None:
            _show_last(chat.history()[-SHOWN_TURNS:])
            if chat.interrupted:
                print("its last turn was interrupted: /resume finishes it")
        _line_editing()
        if _decide_pending(chat):
            _loop(chat)
    return 0


def _show_last(messages: list[HistoryMessage]) -> None:
    """The end of a resumed conversation, as the chat printed it."""
    for message in messages:
        if message.app_authored:
            continue
        if message.text:
            print(f"{'you' if message.role == 'user' else 'agent'}> {message.text}")
        for call in message.tool_calls:
            print(f"  [{call.name}({call.arguments})]")
        for result in message.tool_results:
            print(f"  [-> {'error: ' if result.is_error else ''}{result.text}]")


def _line_editing() -> None:
    """readline's line editing and history for ``input``, on a terminal only (elsewhere it
    may write control codes to stdout)."""
    if sys.stdin.isatty():
        import readline  # noqa: F401  (importing it is what turns it on)


def _loop(chat: Chat) -> None:
    while True:
        try:
            text = input("you> ").strip()
        except EOFError:
            text = ""
        if not text or text == "/quit":
            print()
            return
        try:
            if text == "/resume":
                print(f"agent> {chat.resume().text}")
            else:
                _turn(chat, text)
        except ParlourError as exc:
            print(f"\n[turn failed: {exc}]")
        if not _decide_pending(chat):
            return


def _decide_pending(chat: Chat) -> bool:
    """Ask y/n for each call waiting for approval (read from the store), a reason on n,
    until none waits (the last decision's turn goes on and may ask again); False when the
    input ended first (the undecided calls stay stored for a later ``--resume``)."""
    while waiting := chat.pending:
        for call in waiting:
            answer = _ask(f"approve {call.tool}({call.arguments})? [y/n] ", ("y", "n"))
            if answer is None:
                return False
            try:
                if answer == "y":
                    reply = chat.approve(call.call_id)
                else:
                    reply = chat.deny(call.call_id, _ask("reason> ") or "")
            except ParlourError as exc:  # decided elsewhere meanwhile: look again
                print(f"[{exc}]")
                break
            if reply.text:  # the turn went on (and answered, or asked again)
                print(f"agent> {reply.text}")
    return True


def _ask(prompt: str, choices: tuple[str, ...] = ()) -> str | None:
    """The person's answer to ``prompt`` (asked again until it is one of ``choices``,
    when given); None at the end of input."""
    while True:
        try:
            answer = input(prompt).strip()
        except EOFError:
            print()
            return None
        if not choices or answer.lower() in choices:
            return answer.lower() if choices else answer
        print(f"answer {' or '.join(choices)}")


def _turn(chat: Chat, text: str) -> None:
    print("agent> ", end="", flush=True)
    for event in chat.stream(text):
        if isinstance(event, TextDelta):
            print(event.text, end="", flush=True)
        elif isinstance(event, ToolCallStarted):
            print(f"\n  [{event.name}({event.arguments})", end="", flush=True)
        elif isinstance(event, ToolCallFinished):
            mark = "error: " if event.is_error else ""
            print(f" -> {mark}{event.content}]\nagent> ", end="", flush=True)
        elif isinstance(event, TurnDone):
            print()
