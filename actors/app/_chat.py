"""``parlour chat``: an interactive chat with the agent, streaming each answer as it arrives.

The scripted model by default (offline), a real one with ``--model`` when its key is set;
conversations are durable in ``--data-dir`` and ``--resume ID`` continues one. An empty
line, ``/quit``, end of input or Ctrl-C ends the chat; every finished turn is already saved.
A resumed conversation whose last turn was interrupted says so, and ``/resume`` finishes it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from parlour.runtime import Depth, OutputSize, client_for
from parlour.runtime.errors import ParlourError
from parlour.stores import LmdbStore, MemorySessionCache

from .._service import ConversationService
from ..agent._agent import Agent
from ..agent._chat import Chat
from ..agent._events import TextDelta, ToolCallFinished, ToolCallStarted, TurnDone
from ._workload import get_current_time

OBJECTIVE = "You are a helpful assistant. Answer briefly; use tools when they help."


def run_chat(
    data_dir: Path,
    user: str,
    resume: str | None,
    model: str,
    stdin: TextIO | None = None,
) -> int:
    """The interactive loop; returns the exit status (1 when the model is unknown)."""
    try:
        client = client_for(model)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 1
    agent = Agent(
        client,
        tools=[get_current_time],
        objective=OBJECTIVE,
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )
    with LmdbStore(data_dir) as store, ConversationService(store, MemorySessionCache()) as service:
        try:
            chat = agent.chat(service, user_id=user, conversation_id=resume)
            print(
                f"conversation {chat.conversation_id} ({client.model_id}); resume it with "
                f"--resume {chat.conversation_id}"
            )
            if resume is not None and chat.interrupted:
                print("its last turn was interrupted: /resume finishes it")
            _loop(chat, stdin or sys.stdin)
        except KeyboardInterrupt:
            print("\ninterrupted")
    return 0


def _loop(chat: Chat, stdin: TextIO) -> None:
    while True:
        print("you> ", end="", flush=True)
        line = stdin.readline()
        text = line.strip()
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
