"""The store every contract test starts from: a fresh database on each backend (tests/backends.py),
opened through ``open_store``, holding the three main sessions of ``tests.store.sessions``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SessionRecord, Store, open_store
from tests.backends import Backend
from tests.store.sessions import A, B, W


@pytest.fixture
def store(backend: Backend) -> Iterator[Store]:
    with backend.database() as url:
        s = open_store(url, notifying_kinds=NOTIFYING_KINDS)
        with s.transaction():
            for key in (A, B, W):
                s.insert_session(SessionRecord(key, "a", "main", None, None, None, 1.0, 1.0))
        yield s
        s.close()
