"""Pruning 60,000 -> 50,000 rows (the row cap) with the pruned watermarks raised.

Each round copies a prepared file (untimed), then prunes it: the project's ``Gateway.prune()``
against the same chunked SQL (2,000 rows per transaction: chunk bound, affected sessions,
effective material written into pending cursors, pruned watermark raised, delete; then the
expiry scan, then the free pages given back in steps of 256, one transaction each).
Every outermost transaction of the project is timed from outside by wrapping
``store.transaction`` (benchmark only); the longest one is the longest write lock.
"""

from __future__ import annotations

import shutil

import pytest
from _support import (
    NOW,
    RawLog,
    LockTimer,
    cached_log_file,
    make_pending,
    measure,
    open_gateway,
    scaled,
    session_key,
    TARGET,
    watcher_key,
)

ROWS = scaled(60_000, 2_400)
KEEP = scaled(50_000, 2_000)
SESSIONS = 20
RETENTION_CUTOFF = NOW - 30 * 86_400


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """60k rows over 20 sessions; 3 watchers on the target, two of them with a pending notice."""
    path = cached_log_file(tmp_path_factory.mktemp("prune"), rows=ROWS, sessions=SESSIONS)
    raw = RawLog(path)
    make_pending(raw.db, skip=watcher_key(0))
    raw.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()
    return path


def _fresh(template, tmp_path):
    dest = tmp_path / "prune.db"
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"prune.db{suffix}").unlink(missing_ok=True)
    shutil.copyfile(template, dest)
    return dest


def test_prune_project(benchmark, template, tmp_path):
    state = {}
    longest: list[float] = []

    def setup() -> None:
        if "gw" in state:
            longest.append(max(state["timer"].durations))
            state["gw"].close()
        state["gw"] = open_gateway(_fresh(template, tmp_path), max_rows=KEEP, auto_prune=False)  # timed below, not at open (R30)
        state["timer"] = LockTimer(state["gw"].store)

    def prune():
        return state["gw"].prune()

    counts = measure(benchmark, prune, key="prune.project", setup=setup, rounds_full=12, warmup=1,
                     rows=ROWS, keep=KEEP)
    longest.append(max(state["timer"].durations))
    assert counts["events"] == ROWS - KEEP
    assert state["gw"].store.event_count() == KEEP
    benchmark.extra_info["chunks"] = counts["chunks"]
    benchmark.extra_info["longest_lock_ms_max"] = max(longest) * 1e3
    benchmark.extra_info["longest_lock_ms_median"] = sorted(longest)[len(longest) // 2] * 1e3
    state["gw"].close()


def test_prune_raw(benchmark, template, tmp_path):
    state = {}
    longest: list[float] = []

    def setup() -> None:
        if "raw" in state:
            longest.append(max(state["raw"].chunk_durations))
            state["raw"].close()
        state["raw"] = RawLog(_fresh(template, tmp_path))

    def prune():
        return state["raw"].prune(KEEP, RETENTION_CUTOFF)

    deleted = measure(benchmark, prune, key="prune.raw", setup=setup, rounds_full=12, warmup=1,
                      rows=ROWS, keep=KEEP)
    longest.append(max(state["raw"].chunk_durations))
    assert deleted == ROWS - KEEP
    benchmark.extra_info["longest_lock_ms_max"] = max(longest) * 1e3
    benchmark.extra_info["longest_lock_ms_median"] = sorted(longest)[len(longest) // 2] * 1e3
    state["raw"].close()
