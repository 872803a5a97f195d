"""The store every contract test starts from: a fresh database on each backend (tests/backends.py),
opened through ``open_store``, holding the three main sessions of ``tests.store.sessions``; and
``proxied``, the test server behind a proxy that can cut a COMMIT or its answer off (R29)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.engine import make_url

from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SessionRecord, Store, open_store
from tests.backends import Backend
from tests.store.sessions import A, B, W
from trials.pgproxy import CommitDroppingProxy


@pytest.fixture
def store(backend: Backend) -> Iterator[Store]:
    with backend.database() as url:
        s = open_store(url, notifying_kinds=NOTIFYING_KINDS)
        with s.transaction():
            for key in (A, B, W):
                s.insert_session(SessionRecord(key, "a", "main", None, None, None, 1.0, 1.0))
        yield s
        s.close()


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
