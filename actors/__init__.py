"""parlour.actors: live conversations as Pykka actors, the supervisor, the service, the CLI.

The only package that knows Pykka. ``ConversationService`` is the facade applications call.
"""

from parlour.actors._agent import Agent, Chat
from parlour.actors._conversation import ConversationActor
from parlour.actors._drive import set_provider_concurrency
from parlour.actors._events import (
    AgentEvent,
    OfferAccepted,
    Reply,
    Restarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCancelledError,
    TurnDone,
    TurnError,
)
from parlour.actors._joiners import AgentThinker
from parlour.actors._ledger import CompactionRecord, ModelCallRecord, UsageLedger
from parlour.actors._service import ConversationService, ServiceStats
from parlour.actors._supervisor import Supervisor
from parlour.actors._thinker import BasicThinker, Thinker
from parlour.actors._turn import RetryPolicy

__all__ = [
    "Agent",
    "AgentEvent",
    "AgentThinker",
    "BasicThinker",
    "Chat",
    "CompactionRecord",
    "ConversationActor",
    "ConversationService",
    "ModelCallRecord",
    "OfferAccepted",
    "Reply",
    "Restarted",
    "RetryPolicy",
    "ServiceStats",
    "Supervisor",
    "TextDelta",
    "Thinker",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnCancelledError",
    "TurnDone",
    "TurnError",
    "UsageLedger",
    "set_provider_concurrency",
]
