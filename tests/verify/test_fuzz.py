"""The stateful fuzz of ``sessionstate check``: a few examples in CI, the slow profile's 500."""

from __future__ import annotations

import pytest

from sessionstate.verify.fuzz import parse_budget, run_fuzz


def test_short_fuzz_and_its_budget():
    assert parse_budget("200") == (200, None) and parse_budget("30s") == (None, 30.0)
    report = run_fuzz("5", seed=7)
    assert report.ok, report.failure
    assert report.examples == 5
    assert run_fuzz("0.5s", seed=7).examples >= 1


@pytest.mark.slow
def test_slow_fuzz():
    report = run_fuzz("500", seed=0)
    assert report.ok, report.failure
