"""A strict check of a JSON value (a decoded wire body) against a typing annotation.

The SDKs describe their request bodies as ``TypedDict`` trees (``anthropic.types``,
``openai.types``); ``check(value, annotation)`` walks the value and the annotation together
and raises ``RequestTypeError`` naming the path of the first part that does not fit:
a missing required key, a key the TypedDict does not declare, a value outside a
``Literal``, a wrong scalar type (``bool`` is not an ``int``), or a bad item of a list.

Understood: TypedDict (its required and optional keys, ``Required``/``NotRequired``, no
unknown keys), ``Union``/``Optional``, ``Literal``, ``Iterable``/``Sequence``/``List``
(every item checked), ``Dict``/``Mapping``, ``Annotated``, ``str``/``int``/``float``/
``bool``/``None``/``object``, the SDKs' ``Omit``/``NotGiven`` sentinels and their pydantic
response models (no JSON value is either: a union's ``...Param`` arm describes what such a
model sends). Anything else raises ``TypeError``, so a new kind of annotation is noticed
rather than passed. Pure functions: safe from any thread.
"""

from __future__ import annotations

import collections.abc as abc
import functools
import types
import typing
from typing import Any

import typing_extensions as te

_REQUIRED = {typing.Required, te.Required}
_NOT_REQUIRED = {typing.NotRequired, te.NotRequired}
_LITERAL = {typing.Literal, te.Literal}
_ANNOTATED = {typing.Annotated, te.Annotated}
_LISTS = {list, abc.Iterable, abc.Sequence, abc.Collection, abc.MutableSequence}
_MAPS = {dict, abc.Mapping, abc.MutableMapping}


class RequestTypeError(ValueError):
    """A value does not fit its annotation; ``path`` locates the part that does not."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def check(value: Any, annotation: Any, path: str = "body") -> None:
    """Check ``value`` against ``annotation``, everywhere inside it.

    Raises:
        RequestTypeError: the first part that does not fit, with its path.
        TypeError: the annotation holds a form this checker does not understand.
    """
    annotation = _strip(annotation)
    if te.is_typeddict(annotation):
        _check_typeddict(value, annotation, path)
    elif annotation is typing.Any or annotation is object:
        return
    elif annotation is None or annotation is types.NoneType:
        _expect(value is None, path, f"expected null, got {_show(value)}")
    elif isinstance(annotation, type) and annotation.__name__ in {"Omit", "NotGiven"}:
        raise RequestTypeError(path, f"no JSON value is the sentinel {annotation.__name__}")
    elif isinstance(annotation, type) and _is_model(annotation):
        raise RequestTypeError(
            path, f"{annotation.__name__} is a response model, not a request type"
        )
    elif isinstance(annotation, type):
        _check_scalar(value, annotation, path)
    else:
        _check_generic(value, annotation, path)


def _strip(annotation: Any) -> Any:
    """``annotation`` without ``Annotated`` extras or ``Required``/``NotRequired``."""
    while True:
        origin = typing.get_origin(annotation)
        if origin in _ANNOTATED or origin in _REQUIRED or origin in _NOT_REQUIRED:
            annotation = typing.get_args(annotation)[0]
        elif isinstance(annotation, te.TypeAliasType):
            annotation = annotation.__value__
        else:
            return annotation


def _is_model(kind: type) -> bool:
    """Whether ``kind`` is a pydantic model: the SDKs let a response object stand in for a
    request block (a ``TextBlock`` for a ``TextBlockParam``), but the wire carries its dump,
    which the ``...Param`` arm beside it describes."""
    return any(base.__module__.startswith("pydantic") for base in kind.__mro__[1:])


def _check_scalar(value: Any, kind: type, path: str) -> None:
    if kind is float:
        fits = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind is int:
        fits = isinstance(value, int) and not isinstance(value, bool)
    elif kind in (str, bool):
        fits = isinstance(value, kind)
    else:
        raise TypeError(f"{path}: the checker does not understand the annotation {kind!r}")
    _expect(fits, path, f"expected {kind.__name__}, got {_show(value)}")


def _check_generic(value: Any, annotation: Any, path: str) -> None:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union or origin is types.UnionType:
        _check_union(value, args, path)
    elif origin in _LITERAL:
        allowed = [a for a in args if type(a) is type(value) and a == value]
        _expect(bool(allowed), path, f"expected one of {list(args)!r}, got {_show(value)}")
    elif origin in _LISTS:
        _expect(isinstance(value, list), path, f"expected a list, got {_show(value)}")
        for index, item in enumerate(value):
            check(item, args[0] if args else object, f"{path}[{index}]")
    elif origin in _MAPS:
        _check_mapping(value, args or (str, object), path)
    else:
        raise TypeError(f"{path}: the checker does not understand the annotation {annotation!r}")


def _check_union(value: Any, arms: tuple[Any, ...], path: str) -> None:
    """Fits if one arm fits; otherwise the arm that went deepest explains why not."""
    failures: list[tuple[bool, RequestTypeError]] = []
    for arm in arms:
        try:
            check(value, arm, path)
        except RequestTypeError as failure:
            failures.append((_tagged(value, arm), failure))
        else:
            return
    tagged = [f for is_tagged, f in failures if is_tagged]
    deepest = max(tagged or [f for _, f in failures], key=lambda f: len(f.path))
    if tagged or deepest.path != path:
        raise deepest
    names = ", ".join(_name(arm) for arm in arms)
    raise RequestTypeError(path, f"fits none of {names}: {_show(value)}")


def _tagged(value: Any, arm: Any) -> bool:
    """Whether ``value`` carries the tag (``type`` or ``role``) of TypedDict ``arm``: then
    its failure, not another arm's, explains the value."""
    arm = _strip(arm)
    if not (isinstance(value, dict) and te.is_typeddict(arm)):
        return False
    fields = _fields(arm)
    for tag in ("type", "role"):
        if tag in value and tag in fields:
            literal = _strip(fields[tag][0])
            if typing.get_origin(literal) in _LITERAL:
                return value[tag] in typing.get_args(literal)
    return False


def _check_mapping(value: Any, args: tuple[Any, ...], path: str) -> None:
    _expect(isinstance(value, dict), path, f"expected an object, got {_show(value)}")
    for key, item in value.items():
        check(key, args[0], f"{path} key {key!r}")
        check(item, args[1], f"{path}.{key}")


def _check_typeddict(value: Any, kind: Any, path: str) -> None:
    _expect(isinstance(value, dict), path, f"expected a {kind.__name__}, got {_show(value)}")
    fields = _fields(kind)
    unknown = sorted(set(value) - set(fields))
    _expect(not unknown, path, f"{kind.__name__} has no key {', '.join(map(repr, unknown))}")
    missing = sorted(k for k, (_, required) in fields.items() if required and k not in value)
    _expect(not missing, path, f"{kind.__name__} requires {', '.join(map(repr, missing))}")
    for key, item in value.items():
        check(item, fields[key][0], f"{path}.{key}")


@functools.cache
def _fields(kind: Any) -> dict[str, tuple[Any, bool]]:
    """Each key of TypedDict ``kind``: its annotation and whether it is required.

    ``__required_keys__`` alone is wrong when the module says ``from __future__ import
    annotations`` (as the SDKs' do) on Pythons before 3.12-ish: a ``Required[...]`` string is
    not recognised and the key is filed by the class's totality. The resolved hints keep the
    wrapper, so an explicit ``Required``/``NotRequired`` decides; otherwise the totality does.
    """
    hints = typing.get_type_hints(kind, include_extras=True)
    return {key: (hint, _required(kind, key, hint)) for key, hint in hints.items()}


def _required(kind: Any, key: str, hint: Any) -> bool:
    while typing.get_origin(hint) in _ANNOTATED:
        hint = typing.get_args(hint)[0]
    origin = typing.get_origin(hint)
    if origin in _REQUIRED:
        return True
    if origin in _NOT_REQUIRED:
        return False
    return key in kind.__required_keys__


def _expect(condition: bool, path: str, problem: str) -> None:
    if not condition:
        raise RequestTypeError(path, problem)


def _name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or repr(annotation)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
