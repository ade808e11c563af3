"""The approval routes: the tool calls a conversation's turn waits on, and a person's
decision on each.

The pending calls are read from the stored open-turn record (whoever parked them, any
process). A decision runs as a turn of the conversation's on the host (``ChatHost.decide``):
its events reach every watcher, and the last decision's turn goes on there, detached from
the request, as a sent message's does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parlour.runtime import OpenTurn, TurnStep
from parlour.stores import PersistentStore

from ...agent._approvals import MAX_CALL_ID, MAX_REASON
from ...agent._events import AlreadyDecidedError, ApprovalError
from ._host import ChatHost, ShuttingDownError
from ._http import ApiError, json_body
from ._views import load_mine

__all__ = ["decide", "pending"]

_FIELDS = frozenset({"approve", "reason"})


def _record(store: PersistentStore, conversation_id: str, user_id: str) -> OpenTurn | None:
    snapshot = load_mine(store, conversation_id, user_id)
    return snapshot.turn if snapshot is not None else None


def _pending(record: OpenTurn | None) -> list[dict[str, Any]]:
    if record is None or record.step != TurnStep.APPROVAL:
        return []
    return [
        {
            "call_id": p.call_id,
            "tool": p.tool,
            "arguments": p.arguments,
            "requested_at": p.requested_at.isoformat(),
        }
        for p in record.undecided()
    ]


async def pending(store: PersistentStore, user_id: str, cid: str) -> Response:
    """``{"pending": [{call_id, tool, arguments, requested_at}, ...]}``, in call order;
    empty when nothing waits (a conversation not stored yet, too)."""
    record = await asyncio.to_thread(_record, store, cid, user_id)
    return JSONResponse({"pending": _pending(record)})


def _decision(body: dict[str, Any]) -> tuple[bool, str]:
    """``{"approve": true}`` or ``{"approve": false, "reason": "..."}``.

    Raises:
        ApiError: 400 for a missing or non-boolean ``approve``, a reason that is not a
            string or comes with an approval; 413 for a reason over the limit.
    """
    approve, reason = body.get("approve"), body.get("reason", "")
    if not isinstance(approve, bool):
        raise ApiError(400, 'The body must be {"approve": true} or {"approve": false, ...}.')
    if not isinstance(reason, str):
        raise ApiError(400, "The reason must be a string.")
    if approve and reason:
        raise ApiError(400, "A reason goes with a denial only.")
    if len(reason) > MAX_REASON:
        raise ApiError(413, f"A reason is at most {MAX_REASON} characters, not {len(reason)}.")
    return approve, reason


def _check_pending(record: OpenTurn | None, cid: str, call_id: str) -> None:
    """Refuse, before anything runs, a call that is not waiting: 409 when it was decided,
    404 when nothing of that id waits."""
    if record is not None and any(d.call_id == call_id for d in record.decisions):
        raise ApiError(409, f"Tool call {call_id} on conversation {cid} was already decided.")
    if not any(p["call_id"] == call_id for p in _pending(record)):
        raise ApiError(404, f"Conversation {cid} has no tool call {call_id} waiting for approval.")


async def decide(
    request: Request, host: ChatHost, store: PersistentStore, user: str, cid: str, limit: int
) -> Response:
    """Approve or deny one pending call: 200 with the calls still waiting once the
    decision is saved (``continued``: it was the last, and the turn goes on: follow it
    on ``.../events``)."""
    call_id = request.path_params["call_id"]
    if not 0 < len(call_id) <= MAX_CALL_ID:
        raise ApiError(404, f"Conversation {cid} has no such tool call waiting for approval.")
    approved, reason = _decision(await json_body(request, limit, _FIELDS))
    record = await asyncio.to_thread(_record, store, cid, user)
    _check_pending(record, cid, call_id)
    last = len(_pending(record)) == 1
    try:
        await host.decide(user, cid, call_id, approved, reason)
    except ShuttingDownError as exc:
        raise ApiError(503, str(exc)) from None
    except NotImplementedError as exc:
        raise ApiError(501, str(exc)) from None
    except AlreadyDecidedError as exc:  # another process decided it since the check
        raise ApiError(409, str(exc)) from None
    except ApprovalError as exc:
        raise ApiError(404, str(exc)) from None
    except ValueError as exc:  # an id or reason the agent refuses as text
        raise ApiError(400, str(exc)) from None
    left = [] if last else _pending(await asyncio.to_thread(_record, store, cid, user))
    body = {"call_id": call_id, "approved": approved, "pending": left, "continued": last}
    return JSONResponse(body)
