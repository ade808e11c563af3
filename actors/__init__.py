"""parlour.actors: live conversations as Pykka actors, the supervisor, the service, the CLI.

The only package that knows Pykka. ``ConversationService`` is the facade applications call;
``obtain_conversation`` returns an ``Obtaining`` future (``get``, ``cancel``).
"""

from parlour.actors._conversation import ConversationActor
from parlour.actors._obtain import Obtaining
from parlour.actors._service import ConversationService, ServiceStats
from parlour.actors._supervisor import Seams, Supervisor
from parlour.actors._thinker import BasicThinker, Thinker

__all__ = [
    "BasicThinker",
    "ConversationActor",
    "ConversationService",
    "Obtaining",
    "Seams",
    "ServiceStats",
    "Supervisor",
    "Thinker",
]
