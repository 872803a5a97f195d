"""The store every contract test starts from: a fresh database on each backend (tests/backends.py),
opened through ``open_store``, holding the three main sessions of ``tests.store.sessions``;
``pg_store``, an empty store on the PostgreSQL test database (the PostgreSQL-only tests);
``proxied``, the test server behind a proxy that can cut a COMMIT or its answer off (R29); and
``path``, where the tests of one SQLite file make it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from sessionstate.store import Store
from tests.backends import Backend
from tests.store.helpers import opened_store
from tests.store.sessions import A, B, W
from trials.pgproxy import CommitDroppingProxy


@pytest.fixture
def store(backend: Backend) -> Iterator[Store]:
    with backend.database() as url, opened_store(url, A, B, W) as s:
        yield s


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    """A store on the PostgreSQL test database, holding no session."""
    with opened_store(pg_url) as s:
        yield s


@pytest.fixture
def proxied(pg_url: str) -> Iterator[tuple[str, str, CommitDroppingProxy]]:
    """(URL through the proxy, the direct URL, the proxy)."""
    url = make_url(pg_url)
    host = url.query["host"]
    server_dir = host if isinstance(host, str) else host[0]
    proxy = CommitDroppingProxy(server_dir)
    try:
        yield url.update_query_dict({"host": proxy.directory}).render_as_string(hide_password=False), pg_url, proxy
    finally:
        proxy.close()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """Where the tests of one SQLite file make it (not made yet)."""
    return tmp_path / "state.db"
