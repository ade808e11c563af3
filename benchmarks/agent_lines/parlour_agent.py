"""A two-tool durable, resumable agent on parlour: one process, a restart, the same chat."""

from parlour.actors import Agent, ConversationService
from parlour.runtime import Depth, OutputSize, client_for
from parlour.stores import LmdbStore


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


def get_time(city: str) -> str:
    """The local time in a city."""
    return f"12:00 in {city}."


agent = Agent(
    client_for("claude-sonnet-4-5"),
    tools=[get_weather, get_time],
    objective="Answer briefly.",
    output=OutputSize.STANDARD,
    depth=Depth.IMMEDIATE,
)


def session(text: str, conversation_id: str | None = None) -> str:
    """One process's life: open the store, run a turn (saved at every boundary), stop."""
    with LmdbStore("agent-data") as store:
        service = ConversationService(store)
        chat = agent.chat(service, user_id="alice", conversation_id=conversation_id)
        print(chat.send(text).text)
        service.stop()
        return chat.conversation_id


if __name__ == "__main__":
    conversation = session("What is the weather in Paris?")
    session("And what time is it there?", conversation)  # after a restart: resumed
