"""Hypothesis profiles: `ci` (default, fast) and `fuzz` (long, for maintainers); the slow
profile's tests (marked `slow`), which run only with SESSIONSTATE_SLOW=1; the backend fixtures
every database test takes (tests/backends.py).

Select with HYPOTHESIS_PROFILE=fuzz ./dev test tests/gateway/test_stateful.py
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.backends import Backend, backend_params, postgres_database, postgres_skip_summary

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("SESSIONSTATE_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow profile: set SESSIONSTATE_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=backend_params())
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each storage backend in turn (tests/backends.py)."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def db_url(backend: Backend) -> Iterator[str]:
    """A fresh empty database of the current backend."""
    with backend.database() as url:
        yield url


@pytest.fixture(scope="module", params=backend_params())
def module_db_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """One database per module and backend, for modules that build one world and probe it."""
    with request.param.database() as url:
        yield url


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh empty PostgreSQL schema, for the tests of what only a server does."""
    with postgres_database() as url:
        yield url


_closing_lines: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    line = postgres_skip_summary(terminalreporter.stats.get("skipped", []))
    if line is not None:
        _closing_lines.append(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The run's last line (after pytest's own counts) says when the PostgreSQL half did not run,
    and what runs it: a green run with one backend untested must not read like a green run of both."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for line in _closing_lines:
        if reporter is not None:
            reporter.write_line(line, yellow=True, bold=True)
    _closing_lines.clear()
