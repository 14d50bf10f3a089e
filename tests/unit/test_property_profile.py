"""The property tests draw the same examples every run of the suite (the ``ci``
profile of tests/conftest.py), a test's own ``@settings`` included; ``make fuzz``
is where they are drawn at random."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st


def _drawn() -> list[str]:
    """The examples a property with its own budget draws in one run."""
    seen: list[str] = []

    @settings(max_examples=25)
    @given(st.text(min_size=1))
    def prop(text: str) -> None:
        seen.append(text)

    prop()
    return seen


def test_a_property_with_its_own_max_examples_draws_the_same_examples_every_run() -> None:
    assert os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci"
    assert settings.get_current_profile_name() == "ci"
    first, second = _drawn(), _drawn()
    assert len(first) == 25 and len(set(first)) > 10  # real draws, not one replayed
    assert first == second


def test_the_suite_neither_reads_nor_saves_examples_between_runs() -> None:
    # a failure saved by one run and replayed first by the next would make a run's
    # outcome depend on the runs before it
    assert settings().database is None and settings().derandomize
