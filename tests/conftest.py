"""Hypothesis profiles: `ci` (default, fast) and `fuzz` (long, for maintainers).

Select with HYPOTHESIS_PROFILE=fuzz ./dev test tests/gateway/test_stateful.py
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "fuzz",
    max_examples=3_000,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path / 'state.db'}"
