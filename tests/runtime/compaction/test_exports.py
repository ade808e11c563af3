"""The compaction subpackage exports exactly its public names."""

from __future__ import annotations

import types

import parlour.runtime
import parlour.runtime.compaction as compaction


def test_all_lists_exactly_the_public_names_of_the_compaction_package() -> None:
    public = {
        name
        for name, value in vars(compaction).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    } - {"annotations"}
    assert set(compaction.__all__) == public and len(compaction.__all__) == len(public)


def test_the_runtime_re_exports_the_compaction_names_users_start_from() -> None:
    for name in (
        "ContextWindowManager",
        "CompactionLevel",
        "LLMContextCompactor",
        "OfflineCompactor",
    ):
        assert getattr(parlour.runtime, name) is getattr(compaction, name)
