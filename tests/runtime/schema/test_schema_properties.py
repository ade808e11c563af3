"""Schema generation never crashes and always yields valid JSON Schema, for generated
nested, cyclic, enum-carrying and map-carrying type graphs."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import itertools
import json
import sys
import types
from typing import Annotated, Any, Optional

import jsonschema
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlour.runtime import LLMDescription, LLMExample, LLMRequired, generate_schema


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


_counter = itertools.count()
_LEAVES = ["int", "str", "float", "bool", "Any", "Color", "dt.date", "dt.datetime"]


def _type_expr(n_classes: int) -> st.SearchStrategy[str]:
    names = [f"C{i}" for i in range(n_classes)]
    base = st.sampled_from(_LEAVES + names)
    return st.recursive(
        base,
        lambda inner: st.one_of(
            inner.map(lambda t: f"list[{t}]"),
            inner.map(lambda t: f"dict[str, {t}]"),
            inner.map(lambda t: f"Optional[{t}]"),
        ),
        max_leaves=3,
    )


@st.composite
def type_graphs(draw: st.DrawFn) -> type:
    """A fresh module holding classes C0..Cn (dataclasses or Structs) whose fields
    reference each other freely."""
    n = draw(st.integers(1, 4))
    module = types.ModuleType(f"parlour_hypothesis_types_{next(_counter)}")
    module.__dict__.update(Any=Any, Optional=Optional, Color=Color, dt=dt, Annotated=Annotated)
    module.__dict__.update(LLMRequired=LLMRequired, LLMDescription=LLMDescription)
    module.__dict__.update(LLMExample=LLMExample)
    sys.modules[module.__name__] = module
    for i in range(n):
        field_count = draw(st.integers(0, 4))
        fields = []
        for j in range(field_count):
            expr = draw(_type_expr(n))
            if draw(st.booleans()):
                expr = f"Annotated[{expr}, LLMRequired, LLMDescription('f{j}')]"
            fields.append((f"field{j}", expr))
        cls: type
        if draw(st.booleans()):  # a dataclass
            with_defaults = [(n, t, dataclasses.field(default=None)) for n, t in fields]
            cls = dataclasses.make_dataclass(f"C{i}", with_defaults)
            cls.__module__ = module.__name__
        else:  # a msgspec Struct
            with_defaults_s = [(n, t, None) for n, t in fields]
            cls = msgspec.defstruct(f"C{i}", with_defaults_s, module=module.__name__)
        setattr(module, f"C{i}", cls)
    root: type = module.C0
    return root


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(type_graphs())
def test_generated_type_graphs_give_valid_json_schema(root: type) -> None:
    schema = generate_schema(root)
    out = schema.to_json_schema()
    jsonschema.Draft202012Validator.check_schema(out)
    model = schema.to_model_json_schema()
    jsonschema.Draft202012Validator.check_schema(model)
    # every reference resolves, and $defs sits on the root only
    defs = out.get("$defs", {})
    for ref in _refs(out):
        assert ref.startswith("#/$defs/") and ref.removeprefix("#/$defs/") in defs
    assert all("$defs" not in d for d in defs.values())
    # an object with every field absent is valid unless something is required
    validator = jsonschema.Draft202012Validator(out)
    assert validator.is_valid({}) == ("required" not in out)
    json.loads(schema.render_notation())
