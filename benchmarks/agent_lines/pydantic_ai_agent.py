"""The same agent in Pydantic AI, for the line count (not run: pydantic-ai is not a
dependency). Durability is the application's: the message history is written to a JSON
file after each run and read back before the next; nothing guards two writers."""

import uuid
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessagesTypeAdapter

DATA = Path("agent-data")

agent = Agent("anthropic:claude-sonnet-4-5", instructions="Answer briefly.")


@agent.tool_plain
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


@agent.tool_plain
def get_time(city: str) -> str:
    """The local time in a city."""
    return f"12:00 in {city}."


def load(conversation_id: str) -> list:
    path = DATA / f"{conversation_id}.json"
    if not path.exists():
        return []
    return ModelMessagesTypeAdapter.validate_json(path.read_bytes())


def save(conversation_id: str, messages: list) -> None:
    DATA.mkdir(exist_ok=True)
    path = DATA / f"{conversation_id}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(ModelMessagesTypeAdapter.dump_json(messages))
    tmp.replace(path)


def session(text: str, conversation_id: str | None = None) -> str:
    """One process's life: load the history, run a turn, save the history."""
    conversation_id = conversation_id or uuid.uuid4().hex
    result = agent.run_sync(text, message_history=load(conversation_id))
    save(conversation_id, result.all_messages())
    print(result.output)
    return conversation_id


if __name__ == "__main__":
    conversation = session("What is the weather in Paris?")
    session("And what time is it there?", conversation)  # after a restart: resumed
