"""``AgentCluster``: N shards as named, detached Ray actors, and the agent's API over them.

Every call for a conversation goes to the shard that rendezvous hashing picks among the
shard names, so a conversation is active in one place; the turn runs in that shard and its
events stream back through a Ray streaming generator. Ray is imported when a cluster is
made, never by ``parlour.actors``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import msgspec

from parlour.runtime import ModelSpec

from ..agent._events import AgentEvent, Reply, TurnDone, TurnError
from ..tuning import host_collector
from ._routing import shard_for, shard_names
from ._shard import ShardHost, ShardStatus

__all__ = ["AgentCluster", "ClusterChat", "ShardDown", "ShardLostError", "shard_statuses"]

_actor_class: Any = None


class ShardLostError(TurnError):
    """The shard running a call died (or could not be reached) before it answered.

    Retryable: Ray restarts the shard, which reloads the conversation from the store on
    demand; every turn acknowledged before is stored, and a turn that was cut off kept what
    its last boundary saved. Send again to go on.
    """

    retryable: ClassVar[bool] = True

    def __init__(self, shard: str, conversation_id: str | None, cause: str) -> None:
        self.shard = shard
        self.conversation_id = conversation_id
        about = f" serving conversation {conversation_id}" if conversation_id else ""
        super().__init__(f"Shard {shard}{about} was lost ({cause}); retry the call.")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.shard, self.conversation_id, str(self)))


class ShardDown(msgspec.Struct, frozen=True, kw_only=True):
    """A shard that did not answer ``status``: its name and why."""

    shard: str
    error: str


def _shard_actor() -> Any:
    """The Ray actor class of a shard (made once per process)."""
    global _actor_class
    if _actor_class is None:
        import ray

        class Shard(ShardHost):
            """A shard in a Ray worker process of its own, which hosts its chats: under
            ``tuning.host_collector`` for the shard's life."""

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self._collector = contextlib.ExitStack()
                self._collector.enter_context(host_collector())

            def status(self, node: str = "") -> ShardStatus:
                return super().status(node or ray.get_runtime_context().get_node_id())

            def stop(self) -> None:
                super().stop()
                self._collector.close()

        _actor_class = ray.remote(Shard)
    return _actor_class


def _statuses(handles: dict[str, Any], timeout_s: float) -> list[ShardStatus | ShardDown]:
    import ray

    refs = {shard: handle.status.remote() for shard, handle in handles.items()}
    report: list[ShardStatus | ShardDown] = []
    for shard, ref in refs.items():
        try:
            report.append(ray.get(ref, timeout=timeout_s))
        except Exception as err:  # any failure is the answer: the shard is not healthy
            report.append(ShardDown(shard=shard, error=f"{type(err).__name__}: {err}"[:200]))
    return report


def shard_statuses(
    name: str, shards: int, namespace: str = "parlour", timeout_s: float = 10.0
) -> list[ShardStatus | ShardDown]:
    """The status of a running cluster's shards, found by name (none is created); a shard
    that does not exist is reported down."""
    import ray

    handles: dict[str, Any] = {}
    missing: list[ShardStatus | ShardDown] = []
    for shard in shard_names(name, shards):
        try:
            handles[shard] = ray.get_actor(shard, namespace=namespace)
        except ValueError:
            missing.append(ShardDown(shard=shard, error="no such shard"))
    return _statuses(handles, timeout_s) + missing


@contextmanager
def _translated(
    shard: str, conversation_id: str | None, lost: set[str] | None = None
) -> Iterator[None]:
    """A shard's own exception re-raised as itself; a lost shard as ``ShardLostError``
    (and its name added to ``lost``)."""
    from ray import exceptions

    try:
        yield
    except exceptions.RayTaskError as err:
        cause = err.cause
        if isinstance(cause, BaseException):
            raise cause from None
        raise
    except (exceptions.RayActorError, exceptions.ObjectLostError) as err:
        if lost is not None:
            lost.add(shard)
        raise ShardLostError(shard, conversation_id, type(err).__name__) from err


class AgentCluster:
    """N shards, each a Ray actor hosting one ``ConversationService`` and one ``Agent`` over
    the shared store, created or found by name (a detached group: it outlives this process).

    Args:
        name: the cluster's name; shards are ``{name}-shard-{i}``.
        shards: how many shards route conversations (changing it moves about ``1/N``).
        agent: the agent factory each shard calls, ``"package.module:function"``.
        store: the shared store's configuration: a PostgreSQL connection string (the
            fencing store), or a store factory.
        namespace: the Ray namespace the shards are named in.
        max_restarts: how often Ray restarts a dead shard (-1: always).
        num_cpus: the CPUs each shard reserves for placement.
        conversation_timeout_s: how long a turn waits for a busy conversation.
        restart_timeout_s: after a shard was lost, how long the next call to it waits for
            Ray to restart it (then the call goes ahead and reports what it finds).

    Raises:
        ValueError: ``shards`` is below 1.

    ``ray.init`` must have run in this process. Thread-safety: any thread may call any
    method; a ``ClusterChat`` runs one turn at a time.
    """

    def __init__(
        self,
        name: str,
        *,
        shards: int,
        agent: str,
        store: str,
        namespace: str = "parlour",
        max_restarts: int = -1,
        num_cpus: float = 0.0,
        conversation_timeout_s: float = 30.0,
        restart_timeout_s: float = 60.0,
    ) -> None:
        self.name = name
        self.restart_timeout_s = restart_timeout_s
        self._lost: set[str] = set()  # shards that failed a call and may be restarting
        self.namespace = namespace
        self.shards = shard_names(name, shards)
        options = {
            "namespace": namespace,
            "lifetime": "detached",
            "get_if_exists": True,
            "max_restarts": max_restarts,
            "max_task_retries": 0,  # a turn is never replayed behind the caller's back
            "num_cpus": num_cpus,
            "max_concurrency": 1000,
        }
        actor = _shard_actor()
        self._handles: dict[str, Any] = {
            shard: actor.options(name=shard, **options).remote(
                shard, agent, store, conversation_timeout_s=conversation_timeout_s
            )
            for shard in self.shards
        }

    # -- routing --------------------------------------------------------------------------

    def shard_of(self, conversation_id: str) -> str:
        """The shard every call for ``conversation_id`` goes to."""
        return shard_for(conversation_id, self.shards)

    def handle(self, shard: str) -> Any:
        """The Ray actor handle of a shard."""
        return self._handles[shard]

    def translated(self, shard: str, conversation_id: str | None) -> Any:
        """The context that turns a shard's failures into ``ShardLostError`` and notes the
        loss, so the next call to that shard waits for its restart first."""
        return _translated(shard, conversation_id, self._lost)

    def ready(self, shard: str) -> Any:
        """The handle of ``shard``; after the shard was lost, once it answers again (or
        ``restart_timeout_s`` passed), so a call after a loss is not refused only because
        Ray is still restarting the shard."""
        import ray

        if shard in self._lost:
            try:
                ray.get(self._restarted(shard), timeout=self.restart_timeout_s)
                self._lost.discard(shard)
            except Exception:  # still down: the call that follows reports it
                pass
        return self._handles[shard]

    async def aready(self, shard: str) -> Any:
        """``ready`` from asyncio, never blocking the loop."""
        if shard in self._lost:
            try:
                await asyncio.wait_for(self._restarted(shard), self.restart_timeout_s)
                self._lost.discard(shard)
            except Exception:  # still down: the call that follows reports it
                pass
        return self._handles[shard]

    def _restarted(self, shard: str) -> Any:
        # status is idempotent, so Ray may retry it through a restart (a turn never is)
        return self._handles[shard].status.options(max_task_retries=-1).remote()

    def chat(self, *, user_id: str, conversation_id: str | None = None) -> ClusterChat:
        """A chat for ``user_id``: a new durable conversation (its id minted here, so it can
        be routed before it exists), or the stored one named by ``conversation_id``."""
        new = conversation_id is None
        cid = conversation_id or f"ClusterChat-conv-{secrets.token_hex(2)}-{secrets.token_hex(6)}"
        return ClusterChat(self, user_id, cid, new)

    # -- joiners, offers, release -----------------------------------------------------------

    async def join(
        self, conversation_id: str, user_id: str, *, after: int | None = None
    ) -> AsyncIterator[AgentEvent]:
        """Follow the running turn on ``conversation_id`` from any process, as
        ``ConversationService.join`` (``after`` included): it ends at once for an idle or
        another user's one."""
        shard = self.shard_of(conversation_id)
        with self.translated(shard, conversation_id):
            shard_ref = await self.aready(shard)
            async for ref in shard_ref.join.remote(conversation_id, user_id, after):
                yield await ref

    def offer(self, conversation_id: str, user_id: str, text: str) -> bool:
        """As ``ConversationService.offer``, on the conversation's shard."""
        return bool(self._call("offer", conversation_id, user_id, text))

    def force_release(self, conversation_id: str, user_id: str) -> str | None:
        """As ``ConversationService.force_release``, on the conversation's shard.

        Raises:
            ValueError: the conversation is not live on its shard.
            PermissionError: it belongs to another user.
        """
        owner: str | None = self._call("force_release", conversation_id, user_id)
        return owner

    def remove_conversation(self, conversation_id: str, user_id: str) -> None:
        """As ``ConversationService.remove_conversation``, on the conversation's shard.

        Raises:
            PermissionError: it belongs to another user.
            IllegalStateError: a turn owns it right now.
        """
        self._call("remove_conversation", conversation_id, user_id)

    def _call(self, method: str, conversation_id: str, *args: Any) -> Any:
        import ray

        shard = self.shard_of(conversation_id)
        with self.translated(shard, conversation_id):
            return ray.get(getattr(self.ready(shard), method).remote(conversation_id, *args))

    # -- operations -------------------------------------------------------------------------

    def model_spec(self) -> ModelSpec:
        """The spec of the model the shards' agent talks to (asked of the first shard)."""
        import ray

        shard = self.shards[0]
        with self.translated(shard, None):
            spec: ModelSpec = ray.get(self.ready(shard).model_spec.remote())
        return spec

    def status(self, timeout_s: float = 10.0) -> list[ShardStatus | ShardDown]:
        """Every shard's status, or why it did not answer within ``timeout_s``."""
        return _statuses(self._handles, timeout_s)

    def shutdown(self) -> None:
        """Stop every shard for good (no restart); stored conversations stay stored."""
        import ray

        for handle in self._handles.values():
            ray.kill(handle, no_restart=True)


class ClusterChat:
    """One user's conversation on the cluster, with the agent chat's API: ``send``,
    ``stream``, ``asend``, ``astream``. Each call is routed by the conversation id.

    Raises (every turn): what ``Chat.send`` raises, re-raised here as itself, and
    ``ShardLostError`` when the shard died before answering (retryable).
    """

    def __init__(self, cluster: AgentCluster, user_id: str, conversation_id: str, new: bool):
        self.cluster = cluster
        self.user_id = user_id
        self.conversation_id = conversation_id
        self._new = new  # until a turn is acknowledged, the shard may have to create it

    @property
    def shard(self) -> str:
        return self.cluster.shard_of(self.conversation_id)

    def _remote(self, method: str, text: str, handle: Any) -> Any:
        return getattr(handle, method).remote(self.user_id, self.conversation_id, text, self._new)

    def send(self, text: str) -> Reply:
        """One whole turn on the conversation's shard; blocks until it ends."""
        import ray

        shard = self.shard
        ref = self._remote("send", text, self.cluster.ready(shard))
        with self.cluster.translated(shard, self.conversation_id):
            reply: Reply = ray.get(ref)
        self._new = False
        return reply

    def stream(self, text: str) -> Iterator[AgentEvent]:
        """One whole turn as its events, streamed back from the shard, ending with
        ``TurnDone``. Closing the iterator early cancels the turn on the shard."""
        import ray

        shard = self.shard
        refs = self._remote("stream", text, self.cluster.ready(shard))
        finished = False
        try:
            with self.cluster.translated(shard, self.conversation_id):
                for ref in refs:
                    event: AgentEvent = ray.get(ref)
                    finished = isinstance(event, TurnDone)
                    yield event
            self._new = False
        finally:
            if not finished:
                ray.cancel(refs)

    async def asend(self, text: str) -> Reply:
        """``send`` from asyncio, never blocking the loop."""
        shard = self.shard
        ref = self._remote("send", text, await self.cluster.aready(shard))
        with self.cluster.translated(shard, self.conversation_id):
            reply: Reply = await ref
        self._new = False
        return reply

    async def astream(self, text: str) -> AsyncIterator[AgentEvent]:
        """``stream`` from asyncio, never blocking the loop."""
        import ray

        shard = self.shard
        refs = self._remote("stream", text, await self.cluster.aready(shard))
        finished = False
        try:
            with self.cluster.translated(shard, self.conversation_id):
                async for ref in refs:
                    event: AgentEvent = await ref
                    finished = isinstance(event, TurnDone)
                    yield event
            self._new = False
        finally:
            if not finished:
                ray.cancel(refs)
