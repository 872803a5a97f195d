"""Scaling curves of the cost of one material event (commit per event).

* vs table size: 1k -> 1M rows in the log (3 caught-up watchers on the target); files of
  100k rows and more are built once with raw executemany and cached under .benchmarks/cache/.
* vs watchers per target: 1 -> 10k, all caught up (every one freezes and gets a notice) and
  all pending (R7: none is read or written; the cost should stay flat).
* vs number of sessions: 10 -> 10k sessions, one watcher watching each; events go round-robin
  over the sessions, so every event lands on a different target.

Each point times the project and the raw baseline in the same benchmark, alternating rounds
(``_support.paired``), each side on a file of its own.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from sessionstate import Gateway
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
    paired,
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


def _caught_up(gw: Gateway, target: str = TARGET) -> None:
    reset_caught_up(side_connection(gw), target=target)
    clear_queue(gw)


@pytest.mark.parametrize("rows", TABLE_SIZES)
def test_event_vs_table_size(benchmark, tmp_path, rows):
    gw = open_gateway(cached_log_file(_dir(tmp_path, "project"), rows=rows, sessions=100, watchers=3))
    raw = RawLog(cached_log_file(_dir(tmp_path, "raw"), rows=rows, sessions=100, watchers=3))
    paired(benchmark, gw.record_event, raw.record, key=f"scaling.rows.{rows}", rounds_full=1000,
           setup_project=lambda: _caught_up(gw), setup_other=lambda: reset_caught_up(raw.db),
           args=(TARGET, KIND), kwargs=EVENT, curve="table_size", x=rows, side="project")
    raw.close()
    gw.close()


@pytest.mark.parametrize("state", ["caught_up", "pending"])
@pytest.mark.parametrize("watchers", WATCHERS)
def test_event_vs_watchers(benchmark, tmp_path, watchers, state):
    paths = {}
    for side in SIDES:
        paths[side] = _dir(tmp_path, side) / "watchers.db"
        build_log_file(paths[side], rows=1_000, sessions=10, watchers=watchers)
        if state == "pending":
            db = RawLog(paths[side])
            make_pending(db.db)
            db.close()
    gw, raw = open_gateway(paths["project"]), RawLog(paths["raw"])
    caught_up = state == "caught_up"
    paired(benchmark, gw.record_event, raw.record, key=f"scaling.watchers_{state}.{watchers}",
           rounds_full=_rounds_for(watchers),
           setup_project=(lambda: _caught_up(gw)) if caught_up else (lambda: clear_queue(gw)),
           setup_other=(lambda: reset_caught_up(raw.db)) if caught_up else None,
           args=(TARGET, KIND), kwargs=EVENT, curve=f"watchers_{state}", x=watchers, side="project")
    raw.close()
    gw.close()


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


@pytest.mark.parametrize("sessions", SESSIONS)
def test_event_vs_sessions(benchmark, tmp_path, sessions):
    """Events round-robin over the sessions, the two sides in step (each on its own file)."""
    paths = {side: _dir(tmp_path, side) / "sessions.db" for side in SIDES}
    for path in paths.values():
        _sessions_file(path, sessions)
    gw, raw = open_gateway(paths["project"]), RawLog(paths["raw"])
    keys = [session_key(i) for i in range(sessions)]
    project_keys, raw_keys = itertools.cycle(keys), itertools.cycle(keys)
    current = {"project": keys[0], "raw": keys[0]}

    def setup_project() -> None:
        current["project"] = next(project_keys)
        _caught_up(gw, target=current["project"])

    def setup_raw() -> None:
        current["raw"] = next(raw_keys)
        reset_caught_up(raw.db, target=current["raw"])

    paired(benchmark, lambda: gw.record_event(current["project"], KIND, **EVENT), lambda: raw.record(current["raw"]),
           key=f"scaling.sessions.{sessions}", rounds_full=1000, setup_project=setup_project,
           setup_other=setup_raw, curve="sessions", x=sessions, side="project")
    raw.close()
    gw.close()


def _dir(tmp_path: Path, side: str) -> Path:
    directory = tmp_path / side
    directory.mkdir(exist_ok=True)
    return directory
