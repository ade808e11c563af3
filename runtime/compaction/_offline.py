"""A deterministic compactor that needs no model, for the scripted client, the demo and
tests: each summary is the opening words of its content, as many as the request's target,
followed by every artifact reference the content mentions, so nothing becomes unreachable.

It runs the very plans ``LLMContextCompactor`` runs (segments, age weighting, the ladder's
discipline); only the summary call is replaced. ``compactor_for(client)`` picks it for the
scripted model and a model-backed compactor for any other client.
"""

from __future__ import annotations

from ..artifacts._registry import refs_mentioned_in
from ..models._catalog import ModelCatalog
from ..providers._scripted import ScriptedClient
from ..providers._template import LLMClient
from ._compactor import (
    DEFAULT_MIN_RESULT_CHARS,
    LLMContextCompactor,
    Reply,
)
from ._prompts import SummaryRequest

__all__ = ["OfflineCompactor", "compactor_for", "offline_summary"]

OFFLINE_MODEL_ID = "offline-compactor"


def offline_summary(request: SummaryRequest) -> str:
    """The first ``target_words`` words of the content, ``...`` when cut, then the artifact
    references it mentions that the cut left out. A pure function."""
    words = request.content.split()
    text = " ".join(words[: request.target_words])
    if len(words) > request.target_words:
        text += " ..."
    missing = [ref for ref in refs_mentioned_in(request.content) if ref not in text]
    if missing:
        text += " Artifacts: " + ", ".join(missing)
    return text


class OfflineCompactor(LLMContextCompactor):
    """``LLMContextCompactor`` with ``offline_summary`` as its model: no network, no cost,
    the same output for the same conversation every time. Thread-safe (stateless)."""

    def __init__(self, *, min_result_chars: int = DEFAULT_MIN_RESULT_CHARS) -> None:
        super().__init__(min_result_chars=min_result_chars, model_id=OFFLINE_MODEL_ID)

    def _ready(self, *, asynchronous: bool) -> bool:
        return True

    def _reply(self, request: SummaryRequest) -> Reply:
        return offline_summary(request)

    async def _areply(self, request: SummaryRequest) -> Reply:
        return offline_summary(request)


def compactor_for(client: LLMClient, catalog: ModelCatalog | None = None) -> LLMContextCompactor:
    """The compactor an agent uses unless it is given one: ``OfflineCompactor`` for the
    scripted model (no network, deterministic), else summaries through ``client`` on the
    catalog's smallest grade of its provider (``LLMContextCompactor.for_client``)."""
    if isinstance(client, ScriptedClient):
        return OfflineCompactor()
    return LLMContextCompactor.for_client(client, catalog=catalog)
