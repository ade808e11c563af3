"""The ownership stress test, CI-sized: every eviction path while 64 threads contend."""

from __future__ import annotations

from pathlib import Path

from tests.actors.stress import run_stress


def test_sixty_four_threads_with_every_eviction_path_never_see_two_owners_or_lose_a_turn(
    tmp_path: Path,
) -> None:
    report = run_stress(tmp_path / "db", threads=64, conversations=16, turns_per_thread=6)
    assert report.violations == []
    assert report.turns == report.acknowledged == 64 * 6
    assert report.eviction_attempts > 0 and report.force_releases > 0 and report.reobtains > 0


def test_deferred_saves_under_every_eviction_path_lose_no_turn_and_grant_nothing_stale(
    tmp_path: Path,
) -> None:
    """Each turn saves its message without a wait and now and then an answer with one: a
    release hands over only what is durable, so the next owner (after any eviction) sees
    every turn, and the reopened store holds each exactly once, in order."""
    report = run_stress(
        tmp_path / "db", threads=64, conversations=16, turns_per_thread=6, deferred=True
    )
    assert report.violations == []
    assert report.turns == 64 * 6 and report.acknowledged > report.turns
    assert report.eviction_attempts > 0 and report.force_releases > 0 and report.reobtains > 0


def test_activations_dying_while_owned_never_let_a_second_owner_in_or_lose_a_turn(
    tmp_path: Path,
) -> None:
    """Now and then a turn's activation crashes while the turn holds it: the next obtain
    takes the recorded lease over and waits for its release (before, it was granted at
    once: two owners, and the holder's save refused by the fence)."""
    report = run_stress(
        tmp_path / "db", threads=64, conversations=16, turns_per_thread=6, kills=True
    )
    assert report.violations == []
    assert report.turns == report.acknowledged == 64 * 6
    assert report.kills > 0


def test_chats_keeping_their_lease_between_turns_never_see_two_owners_or_lose_a_turn(
    tmp_path: Path,
) -> None:
    """Half the turns are chats that keep their lease between their own turns, mixed with
    other owners' obtains, evictions, parking, sweeps past retention and force releases:
    each of those takes a kept lease back (or the running turn gives it back at its end),
    and a chat whose lease was taken back obtains anew, never a second owner."""
    report = run_stress(
        tmp_path / "db", threads=64, conversations=16, turns_per_thread=8, kept=True, seed=3
    )
    assert report.violations == []
    assert report.turns == report.acknowledged == 64 * 8
    assert report.reclaims > 0 and report.force_releases > 0 and report.eviction_attempts > 0


def test_kept_leases_with_activations_dying_and_deferred_saves_keep_every_guarantee(
    tmp_path: Path,
) -> None:
    report = run_stress(
        tmp_path / "db",
        threads=64,
        conversations=16,
        turns_per_thread=8,
        kept=True,
        kills=True,
        deferred=True,
        seed=5,
    )
    assert report.violations == []
    assert report.turns == 64 * 8 and report.acknowledged >= report.turns
    assert report.reclaims > 0 and report.kills > 0
