"""parlour.actors: live conversations as Pykka actors, the service, and the agent host.

The only package that knows Pykka. ``ConversationService`` is the facade applications call
(``obtain_conversation`` returns an ``Obtaining`` future: ``get``, ``cancel``); an ``Agent``
opens a ``Chat`` whose turns run on it. The wings: ``agent`` (the agent host), ``app`` (the
``parlour`` command and ``serve``), ``cluster`` (sharding over Ray); ``tuning`` holds the
process knobs. This module re-exports what an application uses.
"""

from ._obtain import Obtaining
from ._service import ConversationService, ServiceStats
from ._thinker import BasicThinker, Event, Thinker
from .agent._agent import Agent
from .agent._chat import Chat
from .agent._effects import RetryPolicy
from .agent._events import (
    AgentEvent,
    AlreadyDecidedError,
    ApprovalDecided,
    ApprovalError,
    ApprovalRequested,
    ApprovalsPendingError,
    Compacted,
    NoSuchApprovalError,
    OfferAccepted,
    PendingApproval,
    Recovered,
    Reply,
    Restarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCancelledError,
    TurnDone,
    TurnError,
)
from .agent._history import HistoryMessage, HistoryToolCall, HistoryToolResult
from .agent._joiners import AgentThinker
from .agent._ledger import CompactionRecord, ModelCallRecord, UsageLedger
from .agent._limits import UsageLimitExceeded, UsageLimits
from .app.serve import TokenBook, asgi_app

__all__ = [
    "Agent",
    "AgentEvent",
    "AgentThinker",
    "AlreadyDecidedError",
    "ApprovalDecided",
    "ApprovalError",
    "ApprovalRequested",
    "ApprovalsPendingError",
    "BasicThinker",
    "Chat",
    "Compacted",
    "CompactionRecord",
    "ConversationService",
    "Event",
    "HistoryMessage",
    "HistoryToolCall",
    "HistoryToolResult",
    "ModelCallRecord",
    "NoSuchApprovalError",
    "Obtaining",
    "OfferAccepted",
    "PendingApproval",
    "Recovered",
    "Reply",
    "Restarted",
    "RetryPolicy",
    "ServiceStats",
    "TextDelta",
    "Thinker",
    "TokenBook",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnCancelledError",
    "TurnDone",
    "TurnError",
    "UsageLedger",
    "UsageLimitExceeded",
    "UsageLimits",
    "asgi_app",
]
