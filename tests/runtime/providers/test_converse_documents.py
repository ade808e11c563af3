"""Converse refuses a request of more than five documents, of two documents of one name, or
with a message that holds a document and no text, or more than twenty images, and a
conversation that stored such attachments would have every later request refused. The
builder keeps each rule: the latest five documents of the request (each earlier one a note
naming it), a later namesake numbered, the names as text where a message had none, the
latest twenty images of a message (each earlier one a note)."""

from __future__ import annotations

import base64
import re
from typing import Any

from botocore.stub import Stubber
from hypothesis import given, settings
from hypothesis import strategies as st

from parlour.runtime import ConversationContext
from parlour.runtime.blocks import ContentBlock, FileBlock, TextBlock
from parlour.runtime.providers import BedrockClient, build_converse_request
from parlour.runtime.testing import (
    converse_response,
    dummy_bedrock_client,
    fake_spec,
    record_params,
)
from tests.runtime.providers._image_headers import conversation_of, image, png

SPEC = fake_spec(id="anthropic.claude-test-v1:0", provider="bedrock", supports_prompt_caching=False)
NAME = re.compile(r"[A-Za-z0-9\-()\[\]]+( [A-Za-z0-9\-()\[\]]+)*")


def _document(filename: str) -> FileBlock:
    return FileBlock(data="aGk=", mime_type="application/pdf", filename=filename)


def _sent(c: ConversationContext) -> dict[str, Any]:
    return build_converse_request(BedrockClient(SPEC, client=object()).build_request(c))


def _documents(params: dict[str, Any]) -> list[dict[str, Any]]:
    return [c["document"] for m in params["messages"] for c in m["content"] if "document" in c]


FILENAMES = ["report.pdf", "report pdf", "Report.pdf", "notes.md", "x" * 230 + ".pdf", "!!!"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.sampled_from(FILENAMES), max_size=4), st.booleans()),
        min_size=1,
        max_size=8,
    )
)
def test_any_history_of_documents_is_sent_as_converse_takes_it(
    turns: list[tuple[list[str], bool]],
) -> None:
    messages: list[list[ContentBlock]] = []
    for filenames, says in turns:
        blocks: list[ContentBlock] = [TextBlock(text="Look.")] if says or not filenames else []
        messages.append(blocks + [_document(name) for name in filenames])
    attached = sum(len(filenames) for filenames, _ in turns)
    params = _sent(conversation_of("b-1", messages))
    documents = _documents(params)
    names = [document["name"] for document in documents]
    assert len(documents) == min(attached, 5)
    assert len(set(names)) == len(names)
    assert all(NAME.fullmatch(name) and len(name) <= 200 for name in names)
    notes = [
        c["text"]
        for m in params["messages"]
        for c in m["content"]
        if "A document," in c.get("text", "")
    ]
    assert len(notes) == attached - len(documents)  # none left out without a word
    for message in params["messages"]:
        if any("document" in c for c in message["content"]):
            assert any(c.get("text", "").strip() for c in message["content"])


def test_the_latest_five_documents_are_sent_and_each_earlier_one_is_named_in_its_place() -> None:
    turns: list[list[ContentBlock]] = [[_document(f"part {n}.pdf")] for n in range(7)]
    params = _sent(conversation_of("b-1", turns))
    assert [d["name"] for d in _documents(params)] == [f"part {n} pdf" for n in range(2, 7)]
    first = params["messages"][0]["content"]
    note = "(A document, part 0 pdf, was attached here; only the latest 5 documents are sent.)"
    assert first == [{"text": note}]


def test_a_document_sent_again_gets_a_number_and_a_document_alone_gets_its_name_as_text() -> None:
    boto = dummy_bedrock_client()
    seen = record_params(boto)
    with Stubber(boto) as stubber:  # botocore checks the request's shape
        stubber.add_response("converse", converse_response("ok"))
        client = BedrockClient(SPEC, client=boto)
        client.respond(
            conversation_of("b-1", [[_document("report.pdf")], [_document("report.pdf")]])
        )
    first, last = seen[-1]["messages"][0], seen[-1]["messages"][2]
    assert first["content"] == [
        {"document": {"format": "pdf", "name": "report pdf", "source": {"bytes": b"hi"}}},
        {"text": "report pdf"},
    ]
    assert last["content"][0]["document"]["name"] == "report pdf (2)"
    assert last["content"][1] == {"text": "report pdf (2)"}


def test_a_numbered_name_at_the_length_limit_stays_within_it_with_single_spaces() -> None:
    long = "a" * 195 + " bcdef.pdf"  # its name cut to 200; numbered, cut after the space
    params = _sent(conversation_of("b-1", [[_document(long)], [_document(long)]]))
    second = _documents(params)[1]["name"]
    assert len(second) <= 200 and second.endswith(" (2)") and "  " not in second


def test_a_message_sends_its_latest_twenty_images_and_a_note_for_each_earlier_one() -> None:
    first, last = image(png(10, 10), "image/png"), image(png(20, 20), "image/png")
    params = _sent(conversation_of("b-1", [[first, *[last] * 21]]))
    content = params["messages"][0]["content"]
    images = [c["image"]["source"]["bytes"] for c in content if "image" in c]
    assert images == [base64.b64decode(last.data)] * 20
    assert content[0] == {"text": "(An image was attached here; a message sends its latest 20.)"}
    assert content[1] == {"text": "(An image was attached here; a message sends its latest 20.)"}
