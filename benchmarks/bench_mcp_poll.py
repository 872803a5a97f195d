"""One tick of the MCP server's notice poll against the raw SELECT it cannot do without.

While a client is subscribed, ``sessionstate mcp`` asks every ``--poll-interval`` (0.2 s)
whether notices were queued for its session by another process (spec R18): the tick is
``queue_owed_notices(W)`` + ``pending_system_events(W)``. Untimed setup: W watches ten
targets, one of them with a notice pending and already queued, so the tick finds nothing new,
the steady state. The project reads W's cursors with their effective material watermark (R7),
derives each pair's state and peeks the queue; the baseline is one SELECT of W's cursors by
primary-key prefix, with no watermark and no queue.
"""

from __future__ import annotations

from _support import AGENT, KIND, connect_raw, create_schema, bulk_cursors, bulk_events, bulk_sessions, measure, open_gateway, session_key, watcher_key

W = watcher_key(0)
TARGETS = [session_key(i) for i in range(10)]
RAW_SELECT = (
    "SELECT target_session_key, target_agent_id, last_seen_sequence, notified_sequence"
    " FROM session_watch_cursors WHERE watcher_session_key = ?"
)


def _build(path) -> None:
    create_schema(path)
    db = connect_raw(path)
    bulk_sessions(db, TARGETS + [W])
    bulk_events(db, TARGETS, 1_000)
    bulk_cursors(db, [(W, t) for t in TARGETS], (1_000, 1_000, 1_000))  # caught up
    db.close()


def test_mcp_poll_project(benchmark, tmp_path):
    path = tmp_path / "poll.db"
    _build(path)
    gw = open_gateway(path)
    gw.record_event(TARGETS[0], KIND, actor_type="human", summary="hello")  # one pending, queued

    def tick() -> list[str]:
        gw.ops.queue_owed_notices(W)
        return gw.pending_system_events(W)

    assert len(measure(benchmark, tick, key="mcp.poll.project", rounds_full=2000)) == 1
    gw.close()


def test_mcp_poll_raw(benchmark, tmp_path):
    path = tmp_path / "poll.db"
    _build(path)
    db = connect_raw(path)
    rows = measure(benchmark, lambda: db.execute(RAW_SELECT, (W,)).fetchall(), key="mcp.poll.raw", rounds_full=2000)
    assert len(rows) == len(TARGETS) and all(r[1] == AGENT for r in rows)
    db.close()
