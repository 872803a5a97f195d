"""What the gateway tests share: the human lines the wake and drain tests record, a read-only
URL of a test database, and a watcher owing one notice behind a plain line (WATCHER watching
the main sessions of two other agents, so no R27 announcement joins its lines)."""

from __future__ import annotations

from sqlalchemy.engine import make_url

from sessionstate import Gateway, notice_text


def human(gw: Gateway, key: str) -> None:
    assert gw.record_event(key, "human_direct_message", actor_type="human", summary="hi")


def read_only_url(db_url: str) -> str:
    """The same database opened so that this connection cannot write: SQLite's read-only
    mode, or PostgreSQL transactions that default to read-only (as on a standby)."""
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        return f"sqlite:///file:{url.database}?mode=ro&uri=true"
    options = f"{url.query['options']} -cdefault_transaction_read_only=on"
    return url.update_query_dict({"options": options}).render_as_string(hide_password=False)


WATCHER = "agent:w:main"


# Main sessions of other agents: no R27 announcement joins the watcher's lines.
BEHIND, CAUGHT_UP = "agent:behind:main", "agent:calm:main"


PLAIN = "[gateway] a plain line queued before the notice"


def owing_watcher(gw: Gateway) -> str:
    """WATCHER with a plain line and then one notice queued; returns the notice's text."""
    for key in (WATCHER, BEHIND):
        gw.create_session(key)
    gw.watch(WATCHER, BEHIND)
    since = gw.ops.cursor_positions(WATCHER, BEHIND).last_seen
    gw.ops.enqueue_system_event(WATCHER, PLAIN)
    gw.record_event(BEHIND, "human_direct_message", actor_type="human", summary="typed upstream")
    assert gw.pending_system_events(WATCHER) == [PLAIN, notice_text(BEHIND, since)]
    return notice_text(BEHIND, since)


def human_upstream(gw: Gateway, target: str) -> None:
    gw.record_event(target, "human_direct_message", actor_type="human", summary="typed upstream")
