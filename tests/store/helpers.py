"""What the store tests share beyond the store fixture (conftest.py) and the three sessions
(sessions.py): builders of stores and databases that more than one test module opens."""

from __future__ import annotations

from pathlib import Path

from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import open_store
from sessionstate.store.sqlite import SqliteStore
from tests.backends import admin_connection


def sqlite_file_store(path: Path) -> SqliteStore:
    # No background checkpoints: these tests read the file's bytes around the store's own steps.
    store = open_store(f"sqlite:///{path}", notifying_kinds=NOTIFYING_KINDS, background_checkpoints=False)
    assert isinstance(store, SqliteStore)
    return store


def end_backend(pid: int) -> None:
    """What a server restart does to one connection: its backend ends (waited for)."""
    with admin_connection() as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone()[0]
