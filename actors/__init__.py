"""parlour.actors: live conversations as Pykka actors, the supervisor, the service, the CLI.

The only package that knows Pykka. ``ConversationService`` is the facade applications call.
"""

from parlour.actors._conversation import ConversationActor
from parlour.actors._service import ConversationService, ServiceStats
from parlour.actors._supervisor import Supervisor
from parlour.actors._thinker import BasicThinker, Thinker

__all__ = [
    "BasicThinker",
    "ConversationActor",
    "ConversationService",
    "ServiceStats",
    "Supervisor",
    "Thinker",
]
