"""Tests written for mutmut's survivors over the notice service's cursors.py, turns.py,
queue.py, reconcile.py and announce.py (with tests/gateway as the selection); each pins
behaviour no other test in tests/gateway noticed changing:

- a read-only database owing notices: the startup sweep's in-memory path queues exactly the
  owed notice (none for a caught-up pair) and logs how many it holds, naming the database;
"""

from __future__ import annotations

import logging

import pytest
from sqlalchemy.engine import make_url

from sessionstate import Gateway, notice_text

WATCHER = "agent:w:main"
# Main sessions of other agents: no R27 announcement joins the watcher's lines.
BEHIND, CAUGHT_UP = "agent:behind:main", "agent:calm:main"


def read_only_url(db_url: str) -> str:
    """The same database opened so that this connection cannot write: SQLite's read-only
    mode, or PostgreSQL transactions that default to read-only (as on a standby)."""
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        return f"sqlite:///file:{url.database}?mode=ro&uri=true"
    options = f"{url.query['options']} -cdefault_transaction_read_only=on"
    return url.update_query_dict({"options": options}).render_as_string(hide_password=False)


def test_a_read_only_open_queues_only_the_owed_notice_and_says_so(db_url, caplog):
    with Gateway.open(db_url) as gw:
        for key in (WATCHER, BEHIND, CAUGHT_UP):
            gw.create_session(key)
        gw.watch(WATCHER, BEHIND)
        gw.watch(WATCHER, CAUGHT_UP)
        owed_since = gw.ops.cursor_positions(WATCHER, BEHIND).last_seen
        gw.record_event(BEHIND, "human_direct_message", actor_type="human", summary="typed upstream")
    with caplog.at_level(logging.INFO, logger="sessionstate"):
        with Gateway.open(read_only_url(db_url), create=False) as gw:
            assert gw.store.read_only
            assert gw.pending_system_events(WATCHER) == [notice_text(BEHIND, owed_since)]
            where = gw.store.where
    assert f"{where} is read-only: 1 owed notice(s) held in memory only" in caplog.messages
