"""Every error parlour raises derives from ``ParlourError``, and the tree drawn in
``parlour.runtime.errors``'s docstring is the whole of them, each under its own base.

A caller catches ``ParlourError`` to catch what parlour raises on purpose, and reads one
docstring to learn the rest; a class parlour defines and the tree leaves out, or places
under the wrong base, fails here. The few exceptions that never leave parlour (raised and
caught inside it) are listed below, each with the reason it may stay outside the tree's
``ParlourError`` branch.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from types import ModuleType

from parlour.runtime import errors
from parlour.runtime.errors import ParlourError
from tests._source_tree import MODULES, parse

PACKAGES = ("parlour.runtime", "parlour.stores", "parlour.actors")
# Exceptions that are signals inside parlour, not errors a caller sees: each is raised and
# caught within the library, so deriving from ParlourError would promise a caller something
# it never receives.
INTERNAL_SIGNALS = {
    # raised inside a model call's delta callback once its turn stopped listening; the
    # turn turns it into TurnCancelledError, or drops the abandoned call's outcome
    "Abandoned",
    # a store command's bad input; ``parlour`` prints its message as one line and exits 1
    "AdminError",
    # an HTTP refusal; the serve app's exception handler answers it as a JSON error body
    "ApiError",
    # the HTTP host refusing a new turn while it shuts down; the app answers it as a 503
    "ShuttingDownError",
    # a prune meeting a version it cannot rebuild; the store moves the damaged run of
    # version records into quarantine and prunes on
    "Unbuildable",
    # a tool's failure the model reads as it is (an MCP error result); the tool round turns
    # it into the call's error result
    "ToolFailed",
}
# The label of the tree's branch that holds the internal signals.
INTERNAL_BRANCH = "internal"
NODE = re.compile(r"^(?P<indent>[│ ]*)[├└]── (?P<name>\w+)")


def _library_modules() -> Iterator[ModuleType]:
    for name in PACKAGES:
        package = importlib.import_module(name)
        yield package
        for found in pkgutil.walk_packages(package.__path__, f"{name}."):
            yield importlib.import_module(found.name)


def _nested(cls: type) -> Iterator[type]:
    yield cls
    for value in vars(cls).values():
        if inspect.isclass(value) and value.__qualname__.startswith(f"{cls.__qualname__}."):
            yield from _nested(value)


def _library_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in _library_modules():
        for value in vars(module).values():
            if not inspect.isclass(value) or value.__module__ != module.__name__:
                continue
            for cls in _nested(value):
                if issubclass(cls, BaseException):
                    assert cls.__name__ not in found, f"two exceptions named {cls.__name__}"
                    found[cls.__name__] = cls
    return found


EXCEPTIONS = _library_exceptions()


def _tree() -> dict[str, tuple[str, str]]:
    """The docstring's tree: each node's name, mapped to its parent's name and its text
    (the node's line and the lines that continue it)."""
    doc = errors.__doc__ or ""
    block = doc.split("```")[1].strip("\n").splitlines()
    assert block[0] == "Exception", "the tree's root is Exception"
    nodes: dict[str, tuple[str, str]] = {}
    path = ["Exception"]
    last = ""
    for line in block[1:]:
        match = NODE.match(line)
        if match is None:  # a continuation of the node above
            parent, text = nodes[last]
            nodes[last] = (parent, f"{text} {line.strip(' │')}")
            continue
        depth = len(match["indent"]) // 4 + 1
        del path[depth:]
        last = match["name"]
        nodes[last] = (path[-1], line[match.end() :].strip())
        path.append(last)
    return nodes


def test_every_exception_parlour_defines_is_a_parlour_error_or_a_listed_internal_signal() -> None:
    assert len(EXCEPTIONS) > 20  # every module was reached
    outside = sorted(
        f"{cls.__module__}.{name}"
        for name, cls in EXCEPTIONS.items()
        if not issubclass(cls, ParlourError) and name not in INTERNAL_SIGNALS
    )
    assert outside == [], "exceptions outside ParlourError:\n" + "\n".join(outside)
    stale = sorted(INTERNAL_SIGNALS - EXCEPTIONS.keys())
    assert stale == [], f"listed as internal signals but not defined: {stale}"
    both = sorted(n for n in INTERNAL_SIGNALS if issubclass(EXCEPTIONS[n], ParlourError))
    assert both == [], f"internal signals that are ParlourErrors (drop them from the list): {both}"


def test_the_errors_docstring_draws_every_exception_under_its_base_naming_its_module() -> None:
    tree = _tree()
    wrong = []
    for name, cls in sorted(EXCEPTIONS.items()):
        if name not in tree:
            wrong.append(f"{cls.__module__}.{name} is not in the tree")
            continue
        parent, text = tree[name]
        expected = INTERNAL_BRANCH if name in INTERNAL_SIGNALS else cls.__bases__[0].__name__
        if parent != expected:
            wrong.append(f"{name} is drawn under {parent}, not {expected}")
        if not cls.__module__.startswith("parlour.runtime.") and cls.__module__ not in text:
            wrong.append(f"{name}'s node does not name its module {cls.__module__}")
    drawn = sorted(set(tree) - EXCEPTIONS.keys() - {INTERNAL_BRANCH})
    assert wrong == [], "the errors tree is off:\n" + "\n".join(wrong)
    assert drawn == [], f"the tree draws classes parlour does not define: {drawn}"


def test_no_exception_class_is_defined_inside_a_function_where_no_caller_can_name_it() -> None:
    found = [
        f"{module}:{node.lineno} {node.name}"
        for module in MODULES
        for function in ast.walk(parse(module))
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.ClassDef)
        and any(
            ast.unparse(base).rsplit(".", 1)[-1] in EXCEPTIONS
            or ast.unparse(base).endswith(("Error", "Exception"))
            for base in node.bases
        )
    ]
    assert found == [], "exception classes defined inside functions:\n" + "\n".join(found)
