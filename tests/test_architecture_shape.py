"""The shape of the classes, checked over the source's syntax: no class split across files
through bases that hold no state, and no probing of a store for what it can do.

A class is read in one place only while its state and the methods that use it live
together: a base that holds nothing of its own, reading attributes only its subclass sets
(or leaving stubs for the subclass to fill), is one class cut in two files. And a store's
abilities are its protocol's members, called as such: a ``getattr`` or ``hasattr`` probe
hides a member the protocol should declare. Like ``test_architecture``, these tests read the
source with ``ast``; nothing is imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tests._source_tree import MODULES, ROOT, imported_from, parse

# Bases that are a kind of value or a declared interface, not half of a class: a class
# deriving from one of these (directly or through parlour classes) is never a split class.
INTERFACE_BASES = {
    "ABC",
    "BaseException",
    "Enum",
    "Exception",
    "Flag",
    "IntEnum",
    "IntFlag",
    "NamedTuple",
    "Protocol",
    "StrEnum",
    "Struct",
    "TypedDict",
}
# Bases from outside parlour that bring no state with them.
STATELESS_BASES = {"object", "Generic"}
# The names a store-like object goes by in actors/: the service's store and session, and a
# loop variable over both (also with a leading underscore, or as ``*_store``/``*_session``).
STORE_NAMES = {"store", "session", "part"}
PROBES = {"getattr", "hasattr"}
STORE_PROTOCOLS = ("PersistentStore", "SessionStore")


def _classes(module: str) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in parse(module).body if isinstance(n, ast.ClassDef)}


def _bindings(module: str) -> dict[str, tuple[str, str | None]]:
    """What each imported name of ``module`` is: ``(module, None)`` for a module, else
    ``(module it comes from, name there)``."""
    bound: dict[str, tuple[str, str | None]] = {}
    for node in ast.walk(parse(module)):
        if isinstance(node, ast.ImportFrom):
            source = imported_from(module, node)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                name = alias.asname or alias.name
                bound[name] = (sub, None) if sub in MODULES else (source, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name] = (alias.name, None)
    return bound


def _defined(module: str, name: str) -> tuple[str, ast.ClassDef] | None:
    """The parlour module and class ``name`` is, as ``module`` sees it (through imports and
    re-exports); None when it is not a parlour class."""
    seen: set[tuple[str, str]] = set()
    while module in MODULES and (module, name) not in seen:
        seen.add((module, name))
        found = _classes(module).get(name)
        if found is not None:
            return module, found
        source, original = _bindings(module).get(name, ("", None))
        if original is None:
            return None
        module, name = source, original
    return None


def _base_class(module: str, base: ast.expr) -> tuple[str, ast.ClassDef] | None:
    """The parlour class a base expression names (``Name``, ``module.Name``, ``Name[T]``)."""
    if isinstance(base, ast.Subscript):
        base = base.value
    if isinstance(base, ast.Name):
        return _defined(module, base.id)
    if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
        source, original = _bindings(module).get(base.value.id, ("", "not a module"))
        return _defined(source, base.attr) if original is None else None
    return None


def _base_name(base: ast.expr) -> str:
    if isinstance(base, ast.Subscript):
        base = base.value
    return base.attr if isinstance(base, ast.Attribute) else ast.unparse(base)


def _is_interface(module: str, cls: ast.ClassDef) -> bool:
    """A Protocol, msgspec Struct, exception, enum, named tuple or ABC, directly or through
    its parlour bases; or abstract by an ``abstractmethod`` or an ``ABCMeta`` metaclass."""
    if any(_base_name(k.value) == "ABCMeta" for k in cls.keywords if k.arg == "metaclass"):
        return True
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            _base_name(d) == "abstractmethod" for d in node.decorator_list
        ):
            return True
    for base in cls.bases:
        if _base_name(base) in INTERFACE_BASES:
            return True
        parent = _base_class(module, base)
        if parent is not None and _is_interface(*parent):
            return True
    return False


def _methods(cls: ast.ClassDef) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _self_attributes(cls: ast.ClassDef, context: type[ast.expr_context]) -> set[str]:
    """The ``self.x`` names the class's methods load (``ast.Load``) or assign (``ast.Store``)."""
    return {
        node.attr
        for method in _methods(cls)
        for node in ast.walk(method)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and isinstance(node.ctx, context)
    }


def _own_members(cls: ast.ClassDef) -> set[str]:
    """What the class body itself provides: its methods and the class attributes given a
    value (a bare annotation only declares what someone else sets)."""
    members = {method.name for method in _methods(cls)}
    for node in cls.body:
        if isinstance(node, ast.Assign):
            members.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            members.update([node.target.id] if isinstance(node.target, ast.Name) else [])
    return members


def _is_stub(method: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A body (after its docstring) that is only ``raise NotImplementedError``."""
    body = method.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    raised = body[0].exc
    raised = raised.func if isinstance(raised, ast.Call) else raised
    return isinstance(raised, ast.Name) and raised.id == "NotImplementedError"


def _holds_state(module: str, cls: ast.ClassDef) -> bool:
    """The class builds state of its own: it defines ``__init__`` (or ``__new__``), or it
    is, through a base from outside parlour, a stateful kind (a ``list``, a pykka actor).
    An attribute a method assigns later does not count: without an ``__init__`` the rest
    of what the class reads is still set by its host's."""
    if {"__init__", "__new__"} & {method.name for method in _methods(cls)}:
        return True
    for base in cls.bases:
        parent = _base_class(module, base)
        if parent is None and _base_name(base) not in STATELESS_BASES:
            return True
        if parent is not None and _holds_state(*parent):
            return True
    return False


def _half_class(cls: ast.ClassDef, base: ast.ClassDef) -> str | None:
    """Why ``base`` is the other half of ``cls`` (None when it is a class of its own): it
    reads attributes it never sets, or leaves stubs that ``cls`` fills."""
    provided = _own_members(base) | _self_attributes(base, ast.Store)
    borrowed = sorted(_self_attributes(base, ast.Load) - provided)
    filled = {method.name for method in _methods(cls)}
    stubs = sorted(m.name for m in _methods(base) if _is_stub(m) and m.name in filled)
    why = []
    if borrowed:
        why.append(f"reads self.{', self.'.join(borrowed)} it never sets")
    if stubs:
        why.append(f"leaves {', '.join(stubs)} as NotImplementedError stubs it fills")
    return "; ".join(why) or None


def _split_classes() -> list[str]:
    found = []
    for module in MODULES:
        for cls in _classes(module).values():
            for expr in cls.bases:
                base = _base_class(module, expr)
                if base is None or base[0] == module:
                    continue
                if _is_interface(*base) or _holds_state(*base):
                    continue
                why = _half_class(cls, base[1])
                if why is not None:
                    found.append(f"{module}.{cls.name}({base[0]}.{base[1].name}): {why}")
    return found


def _store_members() -> set[str]:
    members: set[str] = set()
    for name in STORE_PROTOCOLS:
        found = _defined("parlour.stores._protocols", name)
        assert found is not None, f"parlour.stores._protocols defines no {name}"
        members |= _own_members(found[1])
    return members


def _is_store_like(node: ast.expr) -> bool:
    """The probed object goes by a store's name: ``store``, ``self._store``, ``x.session``."""
    if isinstance(node, ast.Name):
        name = node.id
    elif isinstance(node, ast.Attribute):
        name = node.attr
    else:
        return False
    name = name.lstrip("_")
    return name in STORE_NAMES or name.endswith(("_store", "_session"))


def _store_probes() -> list[str]:
    declared = _store_members()
    found = []
    for module, path in MODULES.items():
        if not module.startswith("parlour.actors"):
            continue
        for node in ast.walk(parse(module)):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in PROBES
                and len(node.args) >= 2
                and _is_store_like(node.args[0])
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                continue
            member = node.args[1].value
            status = "a declared member" if member in declared else "not declared"
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            found.append(f"{where}: {ast.unparse(node)} ({status})")
    return found


def test_no_class_is_split_across_files_through_a_base_that_holds_no_state() -> None:
    found = _split_classes()
    assert found == [], "classes whose base is their other half, in another file:\n" + "\n".join(
        found
    )


def test_no_actor_module_probes_a_store_for_an_ability_instead_of_calling_its_protocol() -> None:
    found = _store_probes()
    assert found == [], (
        "probes of a store (declare the member on PersistentStore or SessionStore and call "
        "it):\n" + "\n".join(found)
    )
