"""A closed store stays closed, on every backend: each later call raises ``StorageUnavailable``
naming the database and saying it is closed, and nothing reconnects behind the caller's back
(a PostgreSQL store once opened a new connection on the next statement)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sessionstate import Gateway, StorageUnavailable
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SessionRecord, Store, open_store
from tests.store.sessions import A, B, W

CALLS: dict[str, Callable[[Store], Any]] = {
    "a read": lambda s: s.head(A, "a"),
    "a session list": lambda s: s.list_sessions(),
    "a cursor read": lambda s: s.cursor(W, A, "a"),
    "a feature table's read": lambda s: s.meta.all(),
    "the serving table's read": lambda s: s.serving.dead_servers(0.0),
    "a transaction": lambda s: s.transaction().__enter__(),
    "an insert": lambda s: s.insert_session(SessionRecord("agent:a:late", "a", "main", None, None, None, 1.0, 1.0)),
    "a change feed": lambda s: s.open_change_feed(tuple(NOTIFYING_KINDS)),
}


def assert_closed(call: Callable[[], Any], where: str) -> None:
    with pytest.raises(StorageUnavailable) as raised:
        call()
    assert "the store is closed" in str(raised.value)
    assert where in str(raised.value)


@pytest.mark.parametrize("what", sorted(CALLS))
def test_every_call_on_a_closed_store_says_it_is_closed(db_url: str, what: str) -> None:
    store = open_store(db_url, notifying_kinds=NOTIFYING_KINDS)
    with store.transaction():
        for key in (A, B, W):
            store.insert_session(SessionRecord(key, "a", "main", None, None, None, 1.0, 1.0))
    store.close()
    assert_closed(lambda: CALLS[what](store), store.where)
    # and again: a refused call does not reopen it either
    assert_closed(lambda: store.head(A, "a"), store.where)


def test_closing_twice_is_harmless_and_the_store_stays_closed(db_url: str) -> None:
    store = open_store(db_url, notifying_kinds=NOTIFYING_KINDS)
    store.close()
    store.close()
    assert_closed(lambda: store.list_sessions(), store.where)


def test_a_closed_gateway_says_so_on_every_backend(db_url: str) -> None:
    gw = Gateway.open(db_url)
    gw.create_session("agent:main:main")
    where = gw.store.where
    gw.close()
    assert_closed(lambda: gw.session_status("agent:main:main"), where)
    assert_closed(lambda: gw.create_session("agent:main:peer"), where)
