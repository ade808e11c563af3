"""Schema generation: JSON Schema and the @-notation from annotated classes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import json
import pathlib
import uuid
from typing import Annotated, Any, ClassVar

import jsonschema
import msgspec
import pytest

from parlour.runtime import (
    SCHEMA_NOTATION_GUIDANCE,
    Artifact,
    ConversationContext,
    JsonIgnore,
    LLMContextIgnore,
    LLMDescription,
    LLMExample,
    LLMRequired,
    LLMSummarizable,
    generate_schema,
    tool_from_function,
    type_alias,
    validate_required_fields,
)
from parlour.runtime.errors import IllegalStateError


class SearchInput(msgspec.Struct):
    query: Annotated[str, LLMRequired, LLMDescription("The search query")]
    max_results: Annotated[int | None, LLMDescription("Maximum results to return (1-100)")] = None


def test_the_seed_example_renders_exactly_with_a_title() -> None:
    assert generate_schema(SearchInput).to_json_schema() == {
        "type": "object",
        "title": "SearchInput",
        "properties": {
            "query": {"type": "string", "description": "The search query"},
            "max_results": {"type": "integer", "description": "Maximum results to return (1-100)"},
        },
        "required": ["query"],
    }


class Camel(msgspec.Struct):
    maxResults: int = 0
    renamedAttr: Annotated[str, LLMDescription("x")] = msgspec.field(
        default="", name="renamed_on_the_wire"
    )
    hidden: Annotated[str, JsonIgnore] = ""
    constant: ClassVar[int] = 3


def test_camel_case_attributes_become_snake_case_properties() -> None:
    assert "max_results" in generate_schema(Camel).to_json_schema()["properties"]


def test_a_rename_wins_and_the_original_name_is_absent_in_both_renderings() -> None:
    schema = generate_schema(Camel)
    props = schema.to_json_schema()["properties"]
    fields = schema.to_notation()["@fields"]
    assert "renamed_on_the_wire" in props and "renamed_on_the_wire" in fields
    for rendering in (json.dumps(schema.to_json_schema()), schema.render_notation()):
        assert "renamed_attr" not in rendering and "renamedAttr" not in rendering


def test_ignored_fields_and_class_vars_are_absent_in_both_renderings() -> None:
    schema = generate_schema(Camel)
    for rendering in (json.dumps(schema.to_json_schema()), schema.render_notation()):
        assert "hidden" not in rendering and "constant" not in rendering


class Ordering(msgspec.Struct):
    plain: str = ""
    needed: Annotated[str, LLMRequired] = ""
    other: int = 0
    items: Annotated[list[str], LLMRequired] = []


def test_required_follows_declaration_order_and_non_required_has_no_marker() -> None:
    schema = generate_schema(Ordering)
    assert schema.to_json_schema()["required"] == ["needed", "items"]
    fields = schema.to_notation()["@fields"]
    assert fields["needed"]["@required"] is True
    assert "@required" not in fields["other"]


class Undescribed(msgspec.Struct):
    plain: str = ""


class Described(msgspec.Struct):
    __llm_description__ = LLMDescription("A described class")
    plain: str = ""


def test_class_and_field_descriptions_have_fallbacks_in_the_notation() -> None:
    notation = generate_schema(Undescribed).to_notation()
    assert notation["@description"] == "Schema of Undescribed"
    assert notation["@fields"]["plain"]["@description"] == "Field plain"
    assert generate_schema(Described).to_notation()["@description"] == "A described class"
    assert generate_schema(Described).to_json_schema()["description"] == "A described class"


class Mode(enum.Enum):
    FAST = "fast"
    CAREFUL = "careful"


class Modal(msgspec.Struct):
    mode: Annotated[Mode, LLMDescription("How to run")] = Mode.FAST
    modes: list[Mode] = []


def test_an_enum_is_a_constrained_string_in_json_schema_and_enum_in_the_notation() -> None:
    schema = generate_schema(Modal)
    assert schema.to_json_schema()["properties"]["mode"] == {
        "type": "string",
        "enum": ["fast", "careful"],
        "description": "How to run",
    }
    field = schema.to_notation()["@fields"]["mode"]
    assert field["@type"] == "enum" and field["@values"] == ["fast", "careful"]


def test_every_published_constant_decodes_to_its_member() -> None:
    published = generate_schema(Modal).to_json_schema()["properties"]["mode"]["enum"]
    assert len(published) == len(Mode)
    assert [msgspec.json.decode(json.dumps(v), type=Mode) for v in published] == list(Mode)


def test_a_list_of_enums_constrains_its_items() -> None:
    schema = generate_schema(Modal)
    assert schema.to_json_schema()["properties"]["modes"] == {
        "type": "array",
        "items": {"type": "string", "enum": ["fast", "careful"]},
    }
    field = schema.to_notation()["@fields"]["modes"]
    assert field["@type"] == "array of enum" and field["@values"] == ["fast", "careful"]


class Exemplified(msgspec.Struct):
    word: Annotated[str, LLMDescription("A word"), LLMExample("alpha", "beta")] = ""
    count: Annotated[int, LLMExample("3", "5")] = 0


def test_examples_publish_as_the_examples_keyword_and_integers_as_numbers() -> None:
    props = generate_schema(Exemplified).to_json_schema()["properties"]
    assert props["word"]["examples"] == ["alpha", "beta"]
    assert "alpha" not in props["word"]["description"]
    assert props["count"]["examples"] == [3, 5]


def test_the_two_renderings_do_not_leak_into_each_other() -> None:
    schema = generate_schema(Modal)
    assert '"enum":' not in schema.render_notation()
    for cls in (Modal, Exemplified, Ordering):
        text = json.dumps(generate_schema(cls).to_json_schema())
        assert '"@' not in text and "(REQUIRED)" not in text and "[Examples:" not in text


class Inner(msgspec.Struct):
    value: int = 0


class Outer(msgspec.Struct):
    inner: Inner
    twin: Inner


def test_every_object_node_has_a_title() -> None:
    schema = generate_schema(Outer)
    out = schema.to_json_schema()
    assert out["title"] == "Outer"
    assert out["properties"]["inner"]["title"] == "Inner"
    assert schema.to_notation()["@fields"]["inner"]["@type"] == "Inner"


class Node(msgspec.Struct):
    url: str
    subpages: Annotated[list[Node], LLMDescription("Pages below")] = []
    parent: Annotated[Node | None, LLMDescription("The page above"), LLMSummarizable("x")] = None


def test_a_cycle_becomes_a_ref_into_root_defs() -> None:
    out = generate_schema(Node).to_json_schema()
    assert out["properties"]["subpages"]["items"] == {"$ref": "#/$defs/Node"}
    assert out["properties"]["parent"]["$ref"] == "#/$defs/Node"
    definition = out["$defs"]["Node"]
    assert definition["title"] == "Node" and "$defs" not in definition
    assert definition["properties"]["parent"]["$ref"] == "#/$defs/Node"
    jsonschema.Draft202012Validator.check_schema(out)
    jsonschema.validate({"url": "a", "subpages": [{"url": "b"}], "parent": {"url": "c"}}, out)


def test_an_acyclic_schema_has_no_defs_and_siblings_are_inlined() -> None:
    out = generate_schema(Outer).to_json_schema()
    assert "$defs" not in out
    assert out["properties"]["inner"] == out["properties"]["twin"]
    assert out["properties"]["twin"]["properties"]["value"] == {"type": "integer"}


def test_a_reference_field_keeps_its_own_keywords_and_the_notation_prints_names() -> None:
    schema = generate_schema(Node)
    parent = schema.to_json_schema()["properties"]["parent"]
    assert parent["description"] == "The page above"
    assert "x-parlour-summarizable" in parent
    fields = schema.to_notation()["@fields"]
    assert fields["parent"]["@type"] == "Node" and "@fields" not in fields["parent"]
    assert fields["subpages"]["@type"] == "array of Node"


def _inner_a() -> type:
    class Inner(msgspec.Struct):
        a: int = 0

    return Inner


def _inner_b() -> type:
    class Inner(msgspec.Struct):
        b: int = 0

    return Inner


def test_two_classes_sharing_a_name_are_refused_naming_both() -> None:
    first, second = _inner_a(), _inner_b()
    root = msgspec.defstruct("Root", [("x", first), ("y", second)])
    with pytest.raises(IllegalStateError) as caught:
        generate_schema(root)
    message = str(caught.value)
    assert "Two types named Inner" in message
    assert first.__qualname__ in message and second.__qualname__ in message


class Dated(msgspec.Struct):
    day: Annotated[dt.date, LLMDescription("The day")]
    at: dt.datetime
    tags: list[str] = []


def test_dates_and_string_lists() -> None:
    schema = generate_schema(Dated)
    props = schema.to_json_schema()["properties"]
    assert props["day"] == {"type": "string", "format": "date", "description": "The day"}
    assert props["at"]["format"] == "date-time"
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert schema.to_notation()["@fields"]["tags"]["@type"] == "array of string"


class Point(msgspec.Struct):
    x: int
    y: int


class Maps(msgspec.Struct):
    counts: dict[str, int]
    anything: dict[str, Any]
    points: dict[str, Point]
    modes: dict[str, Mode]
    untyped: Annotated[Any, LLMDescription("Whatever")] = None


def test_maps_and_untyped_values() -> None:
    props = generate_schema(Maps).to_json_schema()["properties"]
    assert props["counts"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert props["anything"]["additionalProperties"] is True
    assert props["points"]["additionalProperties"]["title"] == "Point"
    assert set(props["points"]["additionalProperties"]["properties"]) == {"x", "y"}
    assert props["modes"]["additionalProperties"]["enum"] == ["fast", "careful"]
    assert props["untyped"] == {"description": "Whatever"}


def test_overrides_replace_only_the_named_description_even_on_a_ref() -> None:
    out = generate_schema(Dated).to_json_schema({"day": "$PARAM-DAY"})
    assert out["properties"]["day"]["description"] == "$PARAM-DAY"
    assert "description" not in out["properties"]["at"]
    node = generate_schema(Node).to_json_schema({"parent": "$PARAM-PARENT"})
    assert node["properties"]["parent"]["description"] == "$PARAM-PARENT"
    assert node["properties"]["subpages"]["description"] == "Pages below"


@dataclasses.dataclass
class Answer:
    title: Annotated[str | None, LLMRequired] = None
    findings: Annotated[list[str] | None, LLMRequired] = None


def test_required_validation_refuses_none_and_blank_and_accepts_empty_lists() -> None:
    assert not validate_required_fields(Answer(title=None, findings=[]))
    assert not validate_required_fields(Answer(title="   ", findings=[]))
    assert validate_required_fields(Answer(title="t", findings=[]))
    assert not validate_required_fields(Answer(title="t", findings=None))


class Leaves(msgspec.Struct):
    path: pathlib.Path
    ident: uuid.UUID
    amount: decimal.Decimal
    when: dt.datetime
    url: str


class Empty(msgspec.Struct):
    pass


def test_standard_value_types_are_leaves_and_an_empty_class_has_empty_properties() -> None:
    props = generate_schema(Leaves).to_json_schema()["properties"]
    assert all("properties" not in p and "title" not in p for p in props.values())
    assert props["ident"] == {"type": "string", "format": "uuid"}
    assert generate_schema(Empty).to_json_schema() == {
        "type": "object",
        "title": "Empty",
        "properties": {},
    }


def test_bounds_come_only_from_msgspec_meta() -> None:
    # Python ints have no width
    class Bounded(msgspec.Struct):
        n: Annotated[int, msgspec.Meta(ge=1, le=100)]
        m: int

    props = generate_schema(Bounded).to_json_schema()["properties"]
    assert props["n"] == {"type": "integer", "minimum": 1, "maximum": 100}
    assert props["m"] == {"type": "integer"}


@type_alias("schema:doc")
class DocArtifact(Artifact):
    body: Annotated[str, LLMSummarizable("document body")] = ""


class CiteInput(msgspec.Struct):
    doc: Annotated[DocArtifact, LLMDescription("The document")]
    docs: list[DocArtifact] = []
    secret: Annotated[str, LLMContextIgnore] = ""


def test_a_tools_model_facing_schema_has_no_harness_keywords_and_reduces_artifacts() -> None:
    schema = generate_schema(CiteInput)
    harness = schema.to_json_schema()
    assert harness["properties"]["doc"]["x-parlour-type-alias"] == "schema:doc"
    assert harness["properties"]["secret"]["x-parlour-context-ignore"] is True
    model = schema.to_model_json_schema()
    assert "x-parlour-" not in json.dumps(model)
    doc = model["properties"]["doc"]
    assert list(doc["properties"]) == ["artifact_ref"] and doc["description"] == "The document"
    assert list(model["properties"]["docs"]["items"]["properties"]) == ["artifact_ref"]
    jsonschema.Draft202012Validator.check_schema(model)


def test_a_tool_definition_carries_the_model_form() -> None:
    # as carried by its ToolDefinitionBlock
    def cite(doc: Annotated[DocArtifact, LLMDescription("The document")], note: str = "") -> str:
        """Cite a document."""
        return note

    definition = tool_from_function(cite).definition()
    assert definition.schema_json is not None and "x-parlour-" not in definition.schema_json
    doc = json.loads(definition.schema_json)["properties"]["doc"]
    assert list(doc["properties"]) == ["artifact_ref"] and doc["description"] == "The document"


def test_a_function_becomes_a_tool_from_its_signature_and_docstring() -> None:
    def search_documents(query: str, max_results: int = 10) -> list[str]:
        """Search for relevant documents.

        Args:
            query: The search query.
            max_results: Maximum results to return
                (1-100).

        Returns:
            The matching titles.
        """
        return [query] * max_results

    tool = tool_from_function(search_documents)
    definition = tool.definition()
    assert definition.name == "search_documents"
    assert definition.description == "Search for relevant documents."
    assert definition.schema_json is not None
    schema = json.loads(definition.schema_json)
    assert schema["required"] == ["query"]
    assert schema["properties"]["max_results"] == {
        "type": "integer",
        "description": "Maximum results to return (1-100).",
    }
    assert tool.call('{"query": "q", "max_results": 2}') == ["q", "q"]
    with pytest.raises(msgspec.ValidationError):
        tool.call('{"max_results": 2}')
    c = ConversationContext("t")
    c.add_tool(tool)
    c.add_user_message("hi")
    assert c.prepare_messages_for_llm().tool_definitions == [definition]


class Reasoned(msgspec.Struct):
    reasoning: str = ""
    answer: Inner | None = None
    tool_calls: list[str] = []


class Envelope(msgspec.Struct):
    reasoning: str = ""
    result: Reasoned | None = None


def test_the_notation_can_omit_named_fields_at_every_depth() -> None:
    # the reasoning strip, as a response handler would ask for it
    notation = generate_schema(Envelope).to_notation(omit={"reasoning", "tool_calls"})
    assert list(notation["@fields"]) == ["result"]
    assert list(notation["@fields"]["result"]["@fields"]) == ["answer"]
    assert "reasoning" in generate_schema(Envelope).render_notation()


def test_the_notation_legend_is_the_contexts_constant() -> None:
    # Appendix B: one legend, explained once
    for key in ("keys beginning with @", "@type", "@description", "@required", "@examples"):
        assert key in SCHEMA_NOTATION_GUIDANCE
    assert "@values" in SCHEMA_NOTATION_GUIDANCE and "@fields" in SCHEMA_NOTATION_GUIDANCE
