"""The artifact registry, references and their spellings."""

from __future__ import annotations

import re

import msgspec
import pytest

from parlour.runtime import (
    Artifact,
    ArtifactRegistry,
    ListArtifact,
    alias_of,
    canonicalize_artifact_refs,
    class_for_alias,
    extract_alias_from_ref,
    normalize_ref,
    refs_mentioned_in,
    type_alias,
)
from parlour.runtime.errors import MissingTypeAliasError


@type_alias("link:page")
class PageArtifact(Artifact):
    url: str
    content: str = ""


@type_alias("person")
class PersonArtifact(Artifact):
    name: str
    homepage: PageArtifact | None = None


class Unaliased(Artifact):
    value: int = 0


def test_a_minted_reference_has_the_documented_shape_and_the_class_alias() -> None:
    ref = ArtifactRegistry().register(PageArtifact(url="u"))
    assert re.match(r"^«artifact:[a-z0-9:-]+~[a-z0-9]{6}»$", ref)
    assert extract_alias_from_ref(ref) == "link:page"


def test_an_existing_reference_is_kept_and_resolves() -> None:
    page = PageArtifact(url="u", artifact_ref="«artifact:link:page~fixed1»")
    registry = ArtifactRegistry()
    assert registry.register(page) == "«artifact:link:page~fixed1»"
    assert registry.get("link:page~fixed1") is page


def test_registering_a_class_without_alias_raises() -> None:
    with pytest.raises(MissingTypeAliasError, match="Unaliased"):
        ArtifactRegistry().register(Unaliased())


def test_a_subclass_does_not_inherit_its_parents_alias() -> None:
    # the alias is the class's own declaration
    class SubPage(PageArtifact):
        pass

    with pytest.raises(MissingTypeAliasError):
        ArtifactRegistry().register(SubPage(url="u"))


def test_every_documented_spelling_resolves_to_the_same_object() -> None:
    registry = ArtifactRegistry()
    page = PageArtifact(url="u", artifact_ref="«artifact:link:page~abc123»")
    registry.register(page)
    spellings = [
        "«artifact:link:page~abc123»",
        "artifact:link:page~abc123",
        "  «artifact:link:page~abc123»\n",
        "link:page~abc123",
        "«link:page~abc123»",
    ]
    assert all(registry.get(s) is page for s in spellings)
    for wrong in ["«artifact:link:page~abc123", "link:page", "LINK:page~abc123", "", "~abc123"]:
        assert registry.get(wrong) is None


def test_alias_extraction_and_the_string_form() -> None:
    assert extract_alias_from_ref("«artifact:link:cite:pubmed~x1y2z3»") == "link:cite:pubmed"
    assert extract_alias_from_ref("«artifact:link:cite:pubmed»") is None
    page = PageArtifact(url="u")
    assert not page.has_reference()
    ref = ArtifactRegistry().register(page)
    assert page.has_reference() and str(page) == ref


def test_refs_mentioned_in_text_are_canonical_deduplicated_and_ordered() -> None:
    text = "«artifact:code~x1» twice: «artifact:code~x1», then «artifact:person~p1»"
    assert refs_mentioned_in(text) == ["«artifact:code~x1»", "«artifact:person~p1»"]
    assert refs_mentioned_in("no refs here") == []


def test_canonicalization_puts_declared_refs_first_then_new_mentions() -> None:
    text = "see «artifact:link:page~abc123»"
    assert canonicalize_artifact_refs(["artifact:link:page~abc123"], text) == [
        "«artifact:link:page~abc123»"
    ]
    text = "«artifact:b~2» and «artifact:a~1» and «artifact:b~2»"
    assert canonicalize_artifact_refs(["c~3"], text) == [
        "«artifact:c~3»",
        "«artifact:b~2»",
        "«artifact:a~1»",
    ]


def _listing(n: int) -> ListArtifact[PageArtifact]:
    return ListArtifact(items=[PageArtifact(url=f"u{i}") for i in range(n)])


def test_a_registered_list_is_one_top_level_entry_with_resolvable_iterands() -> None:
    registry = ArtifactRegistry()
    listing = _listing(200)
    registry.register(listing)
    assert len(registry.get_all_artifacts()) == 1
    assert len(registry.get_all_artifacts_including_reachable()) == 201
    for item in listing.items:
        assert item.artifact_ref is not None and registry.get(item.artifact_ref) is item


def test_a_nested_artifact_is_resolvable_but_not_top_level() -> None:
    registry = ArtifactRegistry()
    home = PageArtifact(url="home")
    registry.register(PersonArtifact(name="Ada", homepage=home))
    assert home.artifact_ref is not None
    assert registry.get(home.artifact_ref) is home
    assert home.artifact_ref not in registry.get_all_artifacts()
    assert registry.size() == 1


def test_clear_empties_the_reachable_tier_too() -> None:
    registry = ArtifactRegistry()
    listing = _listing(3)
    registry.register(listing)
    ref = listing.items[0].artifact_ref
    registry.clear()
    assert registry.get(ref) is None and len(registry) == 0


def test_reregistering_the_same_instance_keeps_one_entry_and_its_ref() -> None:
    registry = ArtifactRegistry()
    page = PageArtifact(url="u")
    first = registry.register(page)
    assert registry.register(page) == first and registry.size() == 1


def test_a_malformed_or_foreign_alias_is_refused() -> None:
    with pytest.raises(ValueError, match="Malformed"):
        type_alias("Not Valid")
    with pytest.raises(ValueError, match="held by"):

        @type_alias("link:page")
        class Impostor(Artifact):
            pass


def test_aliases_resolve_both_ways() -> None:
    assert alias_of(PageArtifact) == "link:page"
    assert class_for_alias("link:page") is PageArtifact
    assert class_for_alias("no:such") is None and alias_of(Unaliased) is None


def test_normalize_ref_is_none_for_none() -> None:
    assert normalize_ref(None) is None


def test_artifacts_are_plain_msgspec_structs() -> None:
    page = PageArtifact(url="u", artifact_ref="«artifact:link:page~abc123»")
    data = msgspec.json.encode(page)
    assert msgspec.json.decode(data, type=PageArtifact) == page
