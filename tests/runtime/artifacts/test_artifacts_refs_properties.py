"""Reference parsing accepts every documented spelling and nothing else."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from parlour.runtime import extract_alias_from_ref, normalize_ref, refs_mentioned_in

_word = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=6)
aliases = (
    st.lists(_word, min_size=1, max_size=4)
    .flatmap(
        lambda words: st.lists(
            st.sampled_from([":", "-"]), min_size=len(words) - 1, max_size=len(words) - 1
        ).map(lambda seps: words[0] + "".join(s + w for s, w in zip(seps, words[1:], strict=True)))
    )
    .filter(lambda a: a.split(":")[0] != "artifact")
)
ids = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8)
padding = st.text(" \t\n", max_size=3)


def _spellings(alias: str, short: str) -> list[str]:
    return [
        f"«artifact:{alias}~{short}»",
        f"artifact:{alias}~{short}",
        f"{alias}~{short}",
        f"«{alias}~{short}»",
    ]


@given(aliases, ids, padding, padding)
def test_every_documented_spelling_normalizes_to_the_canonical_form(
    alias: str, short: str, before: str, after: str
) -> None:
    canonical = f"«artifact:{alias}~{short}»"
    for spelling in _spellings(alias, short):
        assert normalize_ref(before + spelling + after) == canonical
    assert extract_alias_from_ref(canonical) == alias
    assert refs_mentioned_in(f"x {canonical} y {canonical}") == [canonical]


@given(st.text(max_size=40))
def test_anything_accepted_is_one_of_the_documented_spellings(text: str) -> None:
    canonical = normalize_ref(text)
    if canonical is None:
        return
    body = canonical.removeprefix("«artifact:").removesuffix("»")
    alias, _, short = body.rpartition("~")
    assert text.strip() in _spellings(alias, short)


@given(aliases, ids, st.sampled_from(["«", "»"]))
def test_a_lone_guillemet_is_refused(alias: str, short: str, mark: str) -> None:
    text = f"«artifact:{alias}~{short}" if mark == "«" else f"artifact:{alias}~{short}»"
    assert normalize_ref(text) is None


@given(aliases, ids)
def test_uppercase_and_inner_spaces_are_refused(alias: str, short: str) -> None:
    assert normalize_ref(f"«artifact:{alias.upper()}X~{short}»") is None
    assert normalize_ref(f"«artifact:{alias} ~{short}»") is None
    assert normalize_ref(f"«artifact:{alias}~ {short}»") is None
