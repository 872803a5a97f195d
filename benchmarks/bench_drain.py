"""Drain + ack of one notice against one raw ``UPDATE`` + commit.

Untimed setup records one material event, so the watcher holds exactly one pending notice.
The project's ``drain_system_events`` then checks the key, looks the session up, peeks the
queue, opens a transaction, reads the cursor with its effective material watermark (R7), fires
``drain`` (ack) and upserts the cursor, commits, and removes the line from the queue. The
baseline is the smallest durable ack: BEGIN IMMEDIATE, one UPDATE by primary key, COMMIT.
"""

from __future__ import annotations

from _support import KIND, TARGET, RawLog, build_log_file, open_gateway, paired, watcher_key

W = watcher_key(0)


def test_drain(benchmark, tmp_path):
    """Both sides alternately, each on a file of its own."""
    for name in ("project", "raw"):
        build_log_file(tmp_path / f"{name}.db", rows=1_000, sessions=10, watchers=1)
    gw = open_gateway(tmp_path / "project.db")
    raw = RawLog(tmp_path / "raw.db")
    lines = paired(benchmark, gw.drain_system_events, raw.ack, key="drain.project", rounds_full=2000,
                   setup_project=lambda: gw.record_event(TARGET, KIND, actor_type="human", summary="hello"),
                   setup_other=raw.record, args=(W,), other_args=(W,))
    assert len(lines) == 1
    raw.close()
    gw.close()
