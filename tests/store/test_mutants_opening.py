"""Opening an SQLite file that lacks some of this release's tables (sessionstate/store/bootstrap.py).

Found by mutmut over store/bootstrap.py (docs/mutants/store-features.md): every test that
opened a file with some tables missing built that file with ``create_statements`` itself, so
an open that created every table again, not only the missing ones, went unnoticed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sessionstate import Gateway
from sessionstate.store import schema

MAIN = "agent:main:main"


def _tables(path: Path) -> set[str]:
    db = sqlite3.connect(path)
    try:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        db.close()


def test_an_open_creates_only_the_tables_a_file_lacks_and_keeps_the_others_rows(tmp_path):
    """A stamped file missing two feature tables (their triggers gone with them) opens: the
    two are created again with their delete triggers, and the sessions and events already in
    the file are kept."""
    path = tmp_path / "partial.db"
    with Gateway.open(str(path)) as gw:
        gw.create_session(MAIN)
        sequence = gw.record_event(MAIN, "goal_changed", actor_type="human", summary="kept")
    everything = _tables(path)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("DROP TABLE upstream_links")
    db.execute("DROP TABLE session_messages")
    db.close()
    assert everything - _tables(path) == {"upstream_links", "session_messages"}

    with Gateway.open(str(path)) as gw:
        assert gw.ops.state_version(MAIN) == sequence
        assert gw.store.pragma("user_version") == schema.SCHEMA_VERSION
        gw.store.links.replace(MAIN, "main", provider="p", host="h", thread_id="t", marker=None, primed=False,
                               now=1.0)
        gw.transcripts.append_message(MAIN, "user", "hello")
        assert [m.text for m in gw.store.transcripts.recent(MAIN, "main", 5)] == ["hello"]
        gw.ops.delete_session(MAIN)  # the recreated tables' triggers drop the session's rows
        assert gw.store.links.all() == [] and gw.store.transcripts.dump() == []
    assert _tables(path) == everything
