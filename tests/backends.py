"""The storage backends the backend-parametrised tests run on: one factory per backend.

A factory is a context manager that yields the URL of a fresh, empty database and removes it
afterwards (the shape Hypothesis uses for its example databases: the test asks for a database,
the factory decides what that means). The ``backend`` and ``db_url`` fixtures (tests/conftest.py),
the stateful tests and the store conformance suite (tests/store/test_conformance.py) all take
their databases from ``BACKENDS``: adding a backend to the whole suite is adding one entry.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class Backend:
    name: str
    # A fresh empty database's URL for the duration of the block.
    database: Callable[[], AbstractContextManager[str]]


@contextmanager
def sqlite_database() -> Iterator[str]:
    directory = Path(tempfile.mkdtemp(prefix="sessionstate-test-"))
    try:
        yield f"sqlite:///{directory / 'state.db'}"
    finally:
        shutil.rmtree(directory, ignore_errors=True)


PG_URL_ENV = "SESSIONSTATE_TEST_PG_URL"
REQUIRE_PG_ENV = "SESSIONSTATE_REQUIRE_PG"
SKIP_REASON = f"PostgreSQL backend: set {PG_URL_ENV} (scripts/pg-test-server run ./dev test)"
# What runs the PostgreSQL half where ./dev test could not start a server itself.
PG_RUN_COMMAND = "install PostgreSQL (apt-get install postgresql) and rerun ./dev test, or set " \
    f"{PG_URL_ENV} to a server's URL"


def postgres_skip_summary(skipped_reports: list[Any]) -> str | None:
    """The one closing line for a run whose PostgreSQL tests skipped for want of a server
    (None when none did): how many, and what runs them."""
    count = sum(1 for report in skipped_reports if PG_URL_ENV in str(getattr(report, "longrepr", "")))
    if not count:
        return None
    if os.environ.get("SESSIONSTATE_TEST_PG") == "off":  # asked for: ./dev test starts no server
        return f"PostgreSQL half skipped ({count} tests, SESSIONSTATE_TEST_PG=off): ./dev test without it runs both"
    return f"PostgreSQL half skipped ({count} tests, no server): {PG_RUN_COMMAND}"


def skip_or_fail_without_postgres(reason: str) -> None:
    """A PostgreSQL test that cannot run: skips locally, fails where ``postgres_required()``."""
    if postgres_required():
        pytest.fail(f"{reason} (required here: {REQUIRE_PG_ENV}=1 or CI=true)")
    pytest.skip(reason)


def need_psycopg() -> None:
    """``pytest.importorskip("psycopg")`` that obeys ``postgres_required()``."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        skip_or_fail_without_postgres(f"PostgreSQL backend: psycopg is not installed ({exc})")


def postgres_required() -> bool:
    """In CI (``.ci/run`` sets SESSIONSTATE_REQUIRE_PG=1; CI=true too) a PostgreSQL test that
    cannot run fails instead of skipping: CI never passes with one backend untested."""
    return os.environ.get(REQUIRE_PG_ENV) == "1" or os.environ.get("CI") == "true"


def admin_connection() -> Any:
    """An autocommit psycopg connection to the server SESSIONSTATE_TEST_PG_URL names, outside
    any store: for schemas, and for ending other backends as a server restart would."""
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(os.environ[PG_URL_ENV])
    query = {k: v for k, v in url.query.items() if isinstance(v, str)}
    return psycopg.connect(dbname=url.database, user=url.username, password=url.password,
                           host=url.host or query.pop("host", None), port=url.port, autocommit=True, **query)


@contextmanager
def postgres_database() -> Iterator[str]:
    """A new schema in the server named by SESSIONSTATE_TEST_PG_URL, reached through the URL's
    ``search_path`` and dropped afterwards. Without the variable (or psycopg) the test skips,
    or fails where ``postgres_required()``."""
    missing = None if os.environ.get(PG_URL_ENV) else SKIP_REASON
    if missing is None:
        try:
            import psycopg  # noqa: F401
        except ImportError as exc:
            missing = f"PostgreSQL backend: psycopg is not installed ({exc})"
    if missing is not None:
        if postgres_required():
            pytest.fail(f"{missing} (required here: {REQUIRE_PG_ENV}=1 or CI=true)")
        pytest.skip(missing)
    from sqlalchemy.engine import make_url

    schema = f"t_{uuid.uuid4().hex[:16]}"
    with admin_connection() as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    url = make_url(os.environ[PG_URL_ENV]).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin_connection() as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


BACKENDS: list[Backend] = [
    Backend("sqlite", sqlite_database),
    Backend("postgresql", postgres_database),
]


def backend_params() -> list[object]:
    """``pytest.mark.parametrize`` values, one per backend, named after it."""
    return [pytest.param(backend, id=backend.name) for backend in BACKENDS]


# In the default `ci` Hypothesis profile a state machine's PostgreSQL run takes a third of the
# SQLite run's examples: the protocol decisions are the same code on both and get the full
# count on SQLite; what is PostgreSQL's own (its locks, statements, driver errors) shows in
# the shorter run. The three machines' PostgreSQL runs were most of the suite's longest tests
# (738 s of a 68-minute run on a loaded machine). The `fuzz` profile runs both in full.
POSTGRES_EXAMPLE_SHARE = 3


def stateful_test_cases(machine: type, name: str) -> dict[str, type]:
    """One ``unittest`` TestCase per backend for a Hypothesis state machine whose class
    attribute ``backend`` says where it opens its database; ``globals().update(...)`` them."""
    from hypothesis import settings

    cases = {}
    for backend in BACKENDS:
        bound = type(f"{machine.__name__}_{backend.name}", (machine,), {"backend": backend})
        case = bound.TestCase  # type: ignore[attr-defined]
        if backend.name == "postgresql" and os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci":
            current = case.settings
            case.settings = settings(current, max_examples=max(5, current.max_examples // POSTGRES_EXAMPLE_SHARE))
        cases[f"Test{name}_{backend.name}"] = case
    return cases
