"""Scaling curves of the cost of one material event (commit per event).

* vs table size: 1k -> 1M rows in the log (3 caught-up watchers on the target); files of
  100k rows and more are built once with raw executemany and cached under .benchmarks/cache/.
* vs watchers per target: 1 -> 10k, all caught up (every one freezes and gets a notice) and
  all pending (R7: none is read or written; the cost should stay flat).
* vs number of sessions: 10 -> 10k sessions, one watcher watching each; events go round-robin
  over the sessions, so every event lands on a different target.

Each point is measured for the project and for the raw baseline in the same run.
"""

from __future__ import annotations

import itertools

import pytest
from _support import (
    side_connection,
    KIND,
    TARGET,
    RawLog,
    build_log_file,
    bulk_cursors,
    bulk_sessions,
    cached_log_file,
    clear_queue,
    connect_raw,
    create_schema,
    make_pending,
    measure,
    open_gateway,
    reset_caught_up,
    scaled,
    session_key,
    watcher_key,
)

EVENT = {"actor_type": "human", "summary": "hello"}
TABLE_SIZES = scaled([1_000, 10_000, 100_000, 1_000_000], [1_000, 10_000])
WATCHERS = scaled([1, 10, 100, 1_000, 10_000], [1, 10])
SESSIONS = scaled([10, 100, 1_000, 10_000], [10, 100])
SIDES = ["project", "raw"]


def _rounds_for(watchers: int) -> int:
    return max(15, min(1000, 30_000 // watchers))


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("rows", TABLE_SIZES)
def test_event_vs_table_size(benchmark, tmp_path, rows, side):
    path = cached_log_file(tmp_path, rows=rows, sessions=100, watchers=3)
    info = dict(curve="table_size", x=rows, side=side)
    if side == "project":
        gw = open_gateway(path)

        def setup() -> None:
            reset_caught_up(side_connection(gw))
            clear_queue(gw)

        measure(benchmark, gw.record_event, setup=setup, rounds_full=1000, args=(TARGET, KIND), kwargs=EVENT, **info)
        gw.close()
    else:
        raw = RawLog(path)
        measure(benchmark, raw.record, setup=lambda: reset_caught_up(raw.db), rounds_full=1000, **info)
        raw.close()


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("state", ["caught_up", "pending"])
@pytest.mark.parametrize("watchers", WATCHERS)
def test_event_vs_watchers(benchmark, tmp_path, watchers, state, side):
    path = tmp_path / "watchers.db"
    build_log_file(path, rows=1_000, sessions=10, watchers=watchers)
    if state == "pending":
        raw = RawLog(path)
        make_pending(raw.db)
        raw.close()
    info = dict(curve=f"watchers_{state}", x=watchers, side=side)
    if side == "project":
        gw = open_gateway(path)

        def setup() -> None:
            if state == "caught_up":
                reset_caught_up(side_connection(gw))
            clear_queue(gw)

        measure(benchmark, gw.record_event, setup=setup, rounds_full=_rounds_for(watchers),
                args=(TARGET, KIND), kwargs=EVENT, **info)
        gw.close()
    else:
        raw = RawLog(path)
        setup = (lambda: reset_caught_up(raw.db)) if state == "caught_up" else (lambda: None)
        measure(benchmark, raw.record, setup=setup, rounds_full=_rounds_for(watchers), **info)
        raw.close()


def _sessions_file(path, sessions: int) -> None:
    """``sessions`` targets with 10 events each; watcher w0 watches every one of them."""
    create_schema(path)
    db = connect_raw(path)
    keys = [session_key(i) for i in range(sessions)]
    bulk_sessions(db, keys + [watcher_key(0)])
    from _support import bulk_events

    bulk_events(db, keys, sessions * 10)
    bulk_cursors(db, [(watcher_key(0), k) for k in keys], (0, 0, 0))
    db.execute(
        "UPDATE session_watch_cursors SET last_seen_sequence = h.last_sequence,"
        " notified_sequence = h.last_sequence, material_sequence = h.last_sequence"
        " FROM session_state_heads h WHERE h.session_key = target_session_key"
    )
    db.close()


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("sessions", SESSIONS)
def test_event_vs_sessions(benchmark, tmp_path, sessions, side):
    path = tmp_path / "sessions.db"
    _sessions_file(path, sessions)
    keys = itertools.cycle([session_key(i) for i in range(sessions)])
    info = dict(curve="sessions", x=sessions, side=side)
    if side == "project":
        gw = open_gateway(path)

        def setup() -> None:
            key = next(keys)
            reset_caught_up(side_connection(gw), target=key)
            clear_queue(gw)
            args[:] = [key, KIND]

        args: list = []

        def call() -> None:
            gw.record_event(*args, **EVENT)

        measure(benchmark, call, setup=setup, rounds_full=1000, **info)
        gw.close()
    else:
        raw = RawLog(path)
        current: list = []

        def setup() -> None:
            key = next(keys)
            reset_caught_up(raw.db, target=key)
            current[:] = [key]

        measure(benchmark, lambda: raw.record(current[0]), setup=setup, rounds_full=1000, **info)
        raw.close()
