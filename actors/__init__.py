"""parlour.actors: live conversations as Pykka actors, the supervisor, the service, the CLI.

The only package that knows Pykka. ``ConversationService`` is the facade applications call;
``obtain_conversation`` returns an ``Obtaining`` future (``get``, ``cancel``).
"""

from parlour.actors._agent import Agent, Chat
from parlour.actors._conversation import ConversationActor
from parlour.actors._cores import one_core
from parlour.actors._drive import set_provider_concurrency
from parlour.actors._effects import RetryPolicy
from parlour.actors._events import (
    AgentEvent,
    Compacted,
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
from parlour.actors._gate import TurnGate, turn_gate
from parlour.actors._joiners import AgentThinker
from parlour.actors._ledger import CompactionRecord, ModelCallRecord, UsageLedger
from parlour.actors._obtain import Obtaining
from parlour.actors._serve import TokenBook, asgi_app
from parlour.actors._service import ConversationService, ServiceStats
from parlour.actors._supervisor import Seams, Supervisor
from parlour.actors._thinker import BasicThinker, Thinker

__all__ = [
    "Agent",
    "AgentEvent",
    "AgentThinker",
    "BasicThinker",
    "Chat",
    "Compacted",
    "CompactionRecord",
    "ConversationActor",
    "ConversationService",
    "ModelCallRecord",
    "Obtaining",
    "OfferAccepted",
    "Reply",
    "Restarted",
    "RetryPolicy",
    "Seams",
    "ServiceStats",
    "Supervisor",
    "TextDelta",
    "Thinker",
    "TokenBook",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnCancelledError",
    "TurnDone",
    "TurnError",
    "TurnGate",
    "UsageLedger",
    "asgi_app",
    "one_core",
    "set_provider_concurrency",
    "turn_gate",
]
