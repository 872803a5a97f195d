"""Backend factories: each makes a fresh, empty database and yields its URL.

Tests that take the ``db_url`` fixture (tests/conftest.py) run once per backend. SQLite gets a
file in a temporary directory; PostgreSQL gets a new schema in the server named by
``SESSIONSTATE_TEST_PG_URL`` (``scripts/pg-test-server run ./dev test`` starts one), reached
through the URL's ``search_path``, and dropped afterwards. Without that variable the
PostgreSQL half skips, unless ``SESSIONSTATE_REQUIRE_PG=1`` or ``CI=true`` (as in .ci/run),
where a skip would hide an untested backend and so fails instead.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

PG_URL_ENV = "SESSIONSTATE_TEST_PG_URL"
REQUIRE_PG_ENV = "SESSIONSTATE_REQUIRE_PG"
SKIP_REASON = f"PostgreSQL backend: set {PG_URL_ENV} (scripts/pg-test-server run ./dev test)"


class BackendMissing(Exception):
    """The backend cannot run here; ``reason`` says why."""


def postgres_required() -> bool:
    return os.environ.get(REQUIRE_PG_ENV) == "1" or os.environ.get("CI") == "true"


@contextmanager
def sqlite_database() -> Iterator[str]:
    directory = Path(tempfile.mkdtemp(prefix="sessionstate-test-"))
    try:
        yield f"sqlite:///{directory / 'state.db'}"
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _admin_connection() -> Any:
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(os.environ[PG_URL_ENV])
    kwargs = {k: v for k, v in url.query.items() if isinstance(v, str)}
    return psycopg.connect(
        dbname=url.database, user=url.username, password=url.password, host=url.host or kwargs.pop("host", None),
        port=url.port, autocommit=True, **{k: v for k, v in kwargs.items() if k != "host"},
    )


@contextmanager
def postgres_database() -> Iterator[str]:
    if not os.environ.get(PG_URL_ENV):
        raise BackendMissing(SKIP_REASON)
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise BackendMissing(f"PostgreSQL backend: psycopg is not installed ({exc})") from None
    from sqlalchemy.engine import make_url

    schema = f"t_{uuid.uuid4().hex[:16]}"
    with _admin_connection() as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    url = make_url(os.environ[PG_URL_ENV]).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with _admin_connection() as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


BACKENDS: dict[str, Callable[[], ContextManager[str]]] = {
    "sqlite": sqlite_database,
    "postgresql": postgres_database,
}
