"""Hypothesis profiles: `ci` (default, fast) and `fuzz` (long, for maintainers).

Select with HYPOTHESIS_PROFILE=fuzz ./dev test tests/gateway/test_stateful.py
"""

from __future__ import annotations

import os
from typing import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.backends import BACKENDS, REQUIRE_PG_ENV, BackendMissing, postgres_required

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


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str) -> Iterator[str]:
    """A fresh empty database on each backend (tests/backends.py)."""
    yield from _database(backend)


@pytest.fixture(scope="module", params=sorted(BACKENDS))
def module_db_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """One database per module and backend, for modules that build one world and probe it."""
    yield from _database(str(request.param))


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh empty PostgreSQL schema, for the tests of what only a server does."""
    yield from _database("postgresql")


def _database(backend: str) -> Iterator[str]:
    try:
        with BACKENDS[backend]() as url:
            yield url
    except BackendMissing as missing:
        if postgres_required():
            pytest.fail(f"{missing} (required here: {REQUIRE_PG_ENV}=1 or CI=true)")
        pytest.skip(str(missing))
