"""parlour.actors.agent: the agent host. An ``Agent`` (a model client, tools, an objective,
declarations) opens a ``Chat`` on one conversation for one user; a turn (``send``,
``stream``, ``asend``, ``astream``) is written once as a generator of effects
(``_turn.turn_steps``) and driven by a thread driver and an asyncio driver (``_drive``).
Beside it: the model call's plumbing and workers, function tools, the events a turn emits,
the usage ledger, the running turn's followers and offers, and OpenTelemetry spans.

The names an application uses are re-exported by ``parlour.actors``.
"""

__all__: list[str] = []  # its public names are re-exported by the package above
