"""Hypothesis profiles: `ci` (default, fast) and `fuzz` (long, for maintainers); the backend
fixtures every database test takes (tests/backends.py).

Select with HYPOTHESIS_PROFILE=fuzz ./dev test tests/gateway/test_stateful.py
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.backends import Backend, backend_params

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


@pytest.fixture(params=backend_params())
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each storage backend in turn (tests/backends.py)."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def db_url(backend: Backend) -> Iterator[str]:
    """A fresh empty database of the current backend."""
    with backend.database() as url:
        yield url
