"""Drain + ack of one notice against one raw ``UPDATE`` + commit.

Untimed setup records one material event, so the watcher holds exactly one pending notice.
The project's ``drain_system_events`` then checks the key, looks the session up, peeks the
queue, opens a transaction, reads the cursor with its effective material watermark (R7), fires
``drain`` (ack) and upserts the cursor, commits, and removes the line from the queue. The
baseline is the smallest durable ack: BEGIN IMMEDIATE, one UPDATE by primary key, COMMIT.
"""

from __future__ import annotations

from _support import KIND, TARGET, RawLog, build_log_file, measure, open_gateway, watcher_key

W = watcher_key(0)


def test_drain_project(benchmark, tmp_path):
    path = tmp_path / "drain.db"
    build_log_file(path, rows=1_000, sessions=10, watchers=1)
    gw = open_gateway(path)

    def setup() -> None:
        gw.record_event(TARGET, KIND, actor_type="human", summary="hello")

    lines = measure(benchmark, gw.drain_system_events, key="drain.project", setup=setup,
                    rounds_full=2000, args=(W,))
    assert len(lines) == 1
    gw.close()


def test_drain_raw(benchmark, tmp_path):
    path = tmp_path / "drain.db"
    build_log_file(path, rows=1_000, sessions=10, watchers=1)
    raw = RawLog(path)
    measure(benchmark, raw.ack, key="drain.raw", setup=raw.record, rounds_full=2000, args=(W,))
    raw.close()
