"""What the store tests share beyond the store fixture (conftest.py) and the three sessions
(sessions.py): builders of stores and databases that more than one test module opens."""

from __future__ import annotations

from pathlib import Path

from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import open_store
from sessionstate.store.sqlite import SqliteStore


def sqlite_file_store(path: Path) -> SqliteStore:
    # No background checkpoints: these tests read the file's bytes around the store's own steps.
    store = open_store(f"sqlite:///{path}", notifying_kinds=NOTIFYING_KINDS, background_checkpoints=False)
    assert isinstance(store, SqliteStore)
    return store
