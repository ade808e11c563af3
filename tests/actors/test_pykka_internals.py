"""The pykka internals ``LightActor``, ``Mailbox`` and ``Reply`` (``actors/_reply.py``) are
built on still have the shape they were written against, and the installed pykka is one of
the versions ``pyproject.toml`` admits.

``_reply.py`` replaces pykka's thread loop and future but keeps pykka's ``ActorRef`` (so
``ask``/``tell``/``stop``/``proxy`` work): it overrides pykka's private hooks by name, skips
``Actor.__init__`` and ``ThreadingFuture.__init__`` (setting their attributes itself) and
reads pykka's private stop message. A pykka release that renames a hook, adds an attribute
to a skipped ``__init__`` or changes what its loop handles breaks it quietly; each test here
names the internal and the pykka version, so moving the pin starts from its message.
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import logging
import textwrap
import tomllib
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pykka
import pykka._actor
import pykka._envelope
import pykka.messages
from packaging.requirements import Requirement
from packaging.version import Version

from parlour.actors import _reply
from parlour.actors._reply import LightActor, Mailbox, Reply

PYKKA = importlib.metadata.version("pykka")
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _broken(internal: str, what: str) -> str:
    return (
        f"pykka {PYKKA}: {internal} {what}; actors/_reply.py relies on it "
        "(see actors/INTERNALS.md on moving the pykka pin)"
    )


def _params(function: Callable[..., Any]) -> list[tuple[str, str, bool]]:
    """Each parameter's name, kind and whether it has a default (not its annotation)."""
    return [
        (p.name, p.kind.name, p.default is not inspect.Parameter.empty)
        for p in inspect.signature(function).parameters.values()
    ]


def _function(owner: object, name: str) -> ast.FunctionDef:
    """The syntax of pykka's ``owner.name``."""
    source = textwrap.dedent(inspect.getsource(getattr(owner, name)))
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def _self_stores(function: ast.FunctionDef) -> set[str]:
    return {
        node.attr
        for node in ast.walk(function)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and isinstance(node.ctx, ast.Store)
    }


def _self_names(function: ast.FunctionDef) -> set[str]:
    """Every ``self.x`` the function reads or writes."""
    return {
        node.attr
        for node in ast.walk(function)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    }


def test_the_installed_pykka_is_inside_the_range_pyproject_pins() -> None:
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    (pin,) = [Requirement(d) for d in dependencies if Requirement(d).name == "pykka"]
    assert any(s.operator in {"<", "<="} for s in pin.specifier), (
        f"the pykka pin {pin} has no upper bound: a release nobody checked could be installed"
    )
    assert Version(PYKKA) in pin.specifier, (
        f"pykka {PYKKA} is installed, outside the pinned {pin}: check its internals "
        "(this module's tests) and move the pin, or install a pinned version"
    )


def test_future_init_sets_only_the_get_hook_attributes_reply_keeps_in_its_class() -> None:
    # Reply never runs Future.__init__: what it would set, Reply's class must provide.
    internal = "pykka.Future.__init__"
    assert set(pykka.Future().__dict__) == {"_get_hook", "_get_hook_result"}, _broken(
        internal, f"now sets {sorted(pykka.Future().__dict__)}, not _get_hook, _get_hook_result"
    )
    assert pykka.Future()._get_hook is None, _broken(internal, "no longer starts without a hook")
    assert type(_reply._UNSET) is type(pykka.Future()._get_hook_result), _broken(
        internal, "changed its 'no hook result yet' marker"
    )


def test_future_get_runs_a_get_hook_once_through_its_unset_marker() -> None:
    # Reply.get hands a hooked reply to pykka.Future.get, which reads _get_hook_result.
    internal = "pykka.Future.get"
    assert _params(pykka.Future.get) == [
        ("self", "POSITIONAL_OR_KEYWORD", False),
        ("timeout", "KEYWORD_ONLY", True),
    ], _broken(internal, f"changed its signature to {inspect.signature(pykka.Future.get)}")
    assert {"_get_hook", "_get_hook_result"} <= _self_names(_function(pykka.Future, "get")), (
        _broken(internal, "no longer reads _get_hook and _get_hook_result")
    )
    calls: list[float | None] = []

    def hook(timeout: float | None) -> str:
        calls.append(timeout)
        return "hooked"

    reply = Reply()
    reply.set_get_hook(hook)
    assert (reply.get(timeout=1.0), reply.get(timeout=2.0)) == ("hooked", "hooked")
    assert calls == [1.0], _broken(internal, "no longer runs a get hook exactly once")


def test_future_set_get_hook_takes_the_hook_and_stores_it_in_get_hook() -> None:
    internal = "pykka.Future.set_get_hook"
    assert _params(pykka.Future.set_get_hook) == [
        ("self", "POSITIONAL_OR_KEYWORD", False),
        ("func", "POSITIONAL_OR_KEYWORD", False),
    ], _broken(internal, f"changed its signature to {inspect.signature(pykka.Future.set_get_hook)}")
    assert "_get_hook" in _self_stores(_function(pykka.Future, "set_get_hook")), _broken(
        internal, "no longer stores the hook in _get_hook"
    )


def test_every_threading_future_method_that_reads_its_skipped_init_state_is_overridden() -> None:
    # Reply never runs ThreadingFuture.__init__ (its Condition and result): any method of
    # ThreadingFuture that reads them must be one Reply defines itself.
    internal = "pykka.ThreadingFuture"
    init = _self_stores(_function(pykka.ThreadingFuture, "__init__"))
    assert init == {"_condition", "_result"}, _broken(
        f"{internal}.__init__", f"now sets {sorted(init)}, not _condition, _result"
    )
    unsafe = sorted(
        name
        for name, value in vars(pykka.ThreadingFuture).items()
        if inspect.isfunction(value)
        and name != "__init__"
        and init & _self_names(_function(pykka.ThreadingFuture, name))
        and name not in vars(Reply)
    )
    assert unsafe == [], _broken(internal, f"has methods reading its unset state: {unsafe}")


def test_actor_init_sets_exactly_what_light_actor_init_sets_in_its_place() -> None:
    internal = "pykka.Actor.__init__"
    theirs = _self_stores(_function(pykka.Actor, "__init__"))
    ours = _self_stores(_function(LightActor, "__init__"))
    assert theirs == ours == {"actor_urn", "actor_inbox", "actor_stopped", "_actor_ref"}, _broken(
        internal, f"now sets {sorted(theirs)}; LightActor.__init__ sets {sorted(ours)}"
    )


def test_actor_ref_is_a_property_over_actor_ref_underscore() -> None:
    internal = "pykka.Actor.actor_ref"
    prop = inspect.getattr_static(pykka.Actor, "actor_ref")
    assert isinstance(prop, property) and prop.fget is not None, _broken(
        internal, "is no longer a property"
    )
    assert "_actor_ref" in _self_names(_function(prop, "fget")), _broken(
        internal, "no longer reads self._actor_ref"
    )


def test_actor_declares_exactly_the_three_abstract_hooks_light_actor_overrides() -> None:
    internal = "pykka.Actor's abstract methods"
    hooks = {"_create_actor_inbox", "_create_future", "_start_actor_loop"}
    assert pykka.Actor.__abstractmethods__ == hooks, _broken(
        internal, f"are now {sorted(pykka.Actor.__abstractmethods__)}"
    )
    assert not LightActor.__abstractmethods__


def test_actor_start_actor_loop_is_a_method_of_no_arguments() -> None:
    internal = "pykka.Actor._start_actor_loop"
    assert _params(pykka.Actor._start_actor_loop) == [("self", "POSITIONAL_OR_KEYWORD", False)], (
        _broken(
            internal, f"changed its signature to {inspect.signature(pykka.Actor._start_actor_loop)}"
        )
    )


def test_actor_create_actor_inbox_is_a_static_method_of_no_arguments() -> None:
    internal = "pykka.Actor._create_actor_inbox"
    hook = inspect.getattr_static(pykka.Actor, "_create_actor_inbox")
    assert isinstance(hook, staticmethod), _broken(internal, "is no longer a staticmethod")
    assert _params(hook.__func__) == [], _broken(
        internal, f"changed its signature to {inspect.signature(hook.__func__)}"
    )


def test_actor_create_future_is_the_static_method_actor_ref_ask_builds_replies_with() -> None:
    internal = "pykka.Actor._create_future"
    hook = inspect.getattr_static(pykka.Actor, "_create_future")
    assert isinstance(hook, staticmethod) and _params(hook.__func__) == [], _broken(
        internal, "is no longer a staticmethod of no arguments"
    )
    assert "actor_class._create_future()" in inspect.getsource(pykka.ActorRef.ask), _broken(
        internal, "is no longer what ActorRef.ask builds its future with"
    )


def test_actor_handle_receive_handles_exactly_the_messages_light_actor_hands_it() -> None:
    # LightActor passes only these message classes to pykka's _handle_receive.
    internal = "pykka.Actor._handle_receive"
    assert _params(pykka.Actor._handle_receive) == [
        ("self", "POSITIONAL_OR_KEYWORD", False),
        ("message", "POSITIONAL_OR_KEYWORD", False),
    ], _broken(
        internal, f"changed its signature to {inspect.signature(pykka.Actor._handle_receive)}"
    )
    handled = {
        node.args[1].attr
        for node in ast.walk(_function(pykka.Actor, "_handle_receive"))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "isinstance"
        and isinstance(node.args[1], ast.Attribute)
    }
    ours = {kind.__name__ for kind in _reply._PYKKA_MESSAGES}
    assert handled == ours, _broken(internal, f"now handles {sorted(handled)}, not {sorted(ours)}")


def test_actor_stop_is_what_handle_receive_calls_on_a_stop_message() -> None:
    internal = "pykka.Actor._stop"
    assert _params(pykka.Actor._stop) == [("self", "POSITIONAL_OR_KEYWORD", False)], _broken(
        internal, f"changed its signature to {inspect.signature(pykka.Actor._stop)}"
    )
    assert "self._stop()" in inspect.getsource(pykka.Actor._handle_receive), _broken(
        internal, "is no longer what _handle_receive calls to stop the actor"
    )


def test_actor_handle_failure_takes_the_three_parts_of_an_exc_info() -> None:
    internal = "pykka.Actor._handle_failure"
    assert [name for name, *_ in _params(pykka.Actor._handle_failure)] == [
        "self",
        "exception_type",
        "exception_value",
        "traceback",
    ], _broken(
        internal, f"changed its signature to {inspect.signature(pykka.Actor._handle_failure)}"
    )


def test_actor_stop_message_is_a_private_class_actor_ref_stop_sends() -> None:
    internal = "pykka.messages._ActorStop"
    stop = getattr(pykka.messages, "_ActorStop", None)
    assert inspect.isclass(stop), _broken(internal, "is gone")
    assert stop is _reply._STOP and stop() is not None, _broken(internal, "changed its shape")
    assert "_ActorStop()" in inspect.getsource(pykka.ActorRef.stop), _broken(
        internal, "is no longer what ActorRef.stop sends"
    )


def test_envelope_has_the_two_fields_the_light_envelope_copies() -> None:
    internal = "pykka._envelope.Envelope"
    envelope = pykka._envelope.Envelope
    assert list(envelope.__slots__) == list(_reply._Envelope.__slots__), _broken(
        internal, f"now has the fields {envelope.__slots__}"
    )
    assert [name for name, *_ in _params(envelope.__init__)] == ["self", "message", "reply_to"], (
        _broken(internal, f"changed its signature to {inspect.signature(envelope.__init__)}")
    )


def test_actor_inbox_protocol_is_the_put_get_empty_a_mailbox_implements() -> None:
    internal = "pykka._actor.ActorInbox"
    wanted = {"put", "get", "empty"}
    declared = {n for n in vars(pykka._actor.ActorInbox) if not n.startswith("_")}
    assert declared == wanted, _broken(internal, f"now declares {sorted(declared)}")
    assert wanted <= set(vars(Mailbox))


def test_actor_ref_copies_the_actors_inbox_and_stop_flag_and_holds_it_weakly() -> None:
    # ask_nowait and tell read ref.actor_inbox and ref.actor_stopped; a live actor nothing
    # else references is freed only while its ref holds it weakly.
    internal = "pykka.ActorRef.__init__"
    actor = LightActor()
    ref = actor.actor_ref
    assert ref.actor_inbox is actor.actor_inbox, _broken(internal, "no longer keeps actor_inbox")
    assert ref.actor_stopped is actor.actor_stopped, _broken(
        internal, "no longer keeps actor_stopped"
    )
    assert ref.actor_class is LightActor, _broken(internal, "no longer keeps actor_class")
    held = getattr(ref, "_actor_weakref", None)
    assert isinstance(held, weakref.ref) and held() is actor, _broken(
        internal, "no longer holds the actor by a weak reference in _actor_weakref"
    )
    assert not any(value is actor for value in vars(ref).values()), _broken(
        internal, "holds the actor strongly"
    )


def test_pykka_logs_under_the_logger_a_mailbox_logs_its_failures_to() -> None:
    internal = "pykka._actor.logger"
    logger = getattr(pykka._actor, "logger", None)
    assert isinstance(logger, logging.Logger) and logger is _reply._pykka_log, _broken(
        internal, "is no longer the 'pykka' logger"
    )
