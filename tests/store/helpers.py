"""What the store tests share beyond the store fixture (conftest.py) and the three sessions
(sessions.py): builders of stores, sessions and event rows that more than one test module
uses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SessionRecord, Store, open_store
from sessionstate.store.sqlite import SqliteStore
from tests.backends import admin_connection


def insert_sessions(store: Store, *keys: str) -> None:
    """Sessions of agent ``a`` (kind main, made at 1.0), in one transaction."""
    with store.transaction():
        for key in keys:
            store.insert_session(SessionRecord(key, "a", "main", None, None, None, 1.0, 1.0))


@contextmanager
def opened_store(url: str, *keys: str) -> Iterator[Store]:
    """A store on ``url`` with the package's notifying kinds, holding ``keys``; closed after."""
    store = open_store(url, notifying_kinds=NOTIFYING_KINDS)
    try:
        insert_sessions(store, *keys)
        yield store
    finally:
        store.close()


def event(key: str, dedupe: str | None = None) -> tuple[Any, ...]:
    """An event row (``records.EventRow``): a notifying kind by a human."""
    return (key, "a", "human_direct_message", "human", None, None, "s", None, 1.0, 1.0, dedupe)


def sqlite_file_store(path: Path) -> SqliteStore:
    # No background checkpoints: these tests read the file's bytes around the store's own steps.
    store = open_store(f"sqlite:///{path}", notifying_kinds=NOTIFYING_KINDS, background_checkpoints=False)
    assert isinstance(store, SqliteStore)
    return store


def end_backend(pid: int) -> None:
    """What a server restart does to one connection: its backend ends (waited for)."""
    with admin_connection() as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone()[0]


@contextmanager
def sqlite_file_holding(path: Path, *keys: str) -> Iterator[SqliteStore]:
    """``sqlite_file_store`` holding the sessions ``keys``; closed after."""
    store = sqlite_file_store(path)
    try:
        insert_sessions(store, *keys)
        yield store
    finally:
        store.close()


def positions(store: Any, target: str = "t") -> dict[str, tuple[int, int, int]]:
    """Each watcher's positions on ``target`` (agent ``a``)."""
    return {c.watcher: c.positions for c in store.cursors_naming(target, "a")}
