"""Recording events: one material event per transaction, and bursts of 500 per transaction.

Every round starts from the same state: the watchers that should be caught up are put back
to caught up (as a drain would leave them) and the in-memory queue is emptied, untimed. The
timed call then pays for the whole decision: insert, head bump, caught-up lookup, a `freeze`
per caught-up watcher, the cursor upsert and the commit (plus, for the project, validation,
the session lookup and queueing the notices).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _support import (
    side_connection,
    KIND,
    TARGET,
    RawLog,
    build_log_file,
    clear_queue,
    make_pending,
    measure,
    open_gateway,
    reset_caught_up,
    scaled,
    watcher_key,
)

EVENT = {"actor_type": "human", "summary": "hello"}
BATCH = scaled(500, 50)
PENDING = scaled(1_000, 50)


def _file(tmp_path: Path, watchers: int, pending_after_first: bool = False) -> Path:
    path = tmp_path / "record.db"
    build_log_file(path, rows=1_000, sessions=10, watchers=watchers)
    if pending_after_first:
        raw = RawLog(path)
        make_pending(raw.db, skip=watcher_key(0))
        raw.close()
    return path


@pytest.mark.parametrize("watchers", [1, 3])
def test_record_project(benchmark, tmp_path, watchers):
    gw = open_gateway(_file(tmp_path, watchers))

    def setup() -> None:
        reset_caught_up(side_connection(gw))
        clear_queue(gw)

    measure(benchmark, gw.record_event, key=f"record.w{watchers}.project", setup=setup,
            rounds_full=2000, args=(TARGET, KIND), kwargs=EVENT)
    assert len(gw.queue.sessions()) == watchers
    gw.close()


@pytest.mark.parametrize("watchers", [1, 3])
def test_record_traced_project(benchmark, tmp_path, watchers):
    """The same with the protocol trace on: an event line, a step and a notice line per watcher."""
    gw = open_gateway(_file(tmp_path, watchers), trace=tmp_path / "trace.jsonl")

    def setup() -> None:
        reset_caught_up(side_connection(gw))
        clear_queue(gw)

    measure(benchmark, gw.record_event, key=f"record.w{watchers}.traced", setup=setup,
            rounds_full=2000, args=(TARGET, KIND), kwargs=EVENT)
    assert (tmp_path / "trace.jsonl").stat().st_size > 0
    gw.close()


@pytest.mark.parametrize("watchers", [1, 3])
def test_record_raw(benchmark, tmp_path, watchers):
    raw = RawLog(_file(tmp_path, watchers))
    measure(benchmark, raw.record, key=f"record.w{watchers}.raw", setup=lambda: reset_caught_up(raw.db),
            rounds_full=2000)
    raw.close()


def test_record_pending_project(benchmark, tmp_path):
    """1 caught-up watcher plus PENDING watchers already holding a notice on the target."""
    gw = open_gateway(_file(tmp_path, PENDING + 1, pending_after_first=True))

    def setup() -> None:
        reset_caught_up(side_connection(gw), watcher=watcher_key(0))
        clear_queue(gw)

    measure(benchmark, gw.record_event, key="record.pending.project", setup=setup,
            rounds_full=2000, args=(TARGET, KIND), kwargs=EVENT, pending=PENDING)
    gw.close()


def test_record_pending_raw(benchmark, tmp_path):
    raw = RawLog(_file(tmp_path, PENDING + 1, pending_after_first=True))
    measure(benchmark, raw.record, key="record.pending.raw",
            setup=lambda: reset_caught_up(raw.db, watcher=watcher_key(0)), rounds_full=2000, pending=PENDING)
    raw.close()


def test_batch_project(benchmark, tmp_path):
    """BATCH events through ``Gateway.record_events``: validated up front, appended in one
    transaction, notices queued after the commit."""
    gw = open_gateway(_file(tmp_path, 3))
    burst = [dict(session_key=TARGET, kind=KIND, **EVENT) for _ in range(BATCH)]

    def setup() -> None:
        reset_caught_up(side_connection(gw))
        clear_queue(gw)

    result = measure(benchmark, gw.record_events, key="batch.project", setup=setup, rounds_full=40,
                     warmup=2, args=(burst,), events=BATCH)
    assert len(result) == BATCH and None not in result
    gw.close()


def test_batch_raw(benchmark, tmp_path):
    raw = RawLog(_file(tmp_path, 3))
    measure(benchmark, raw.record_batch, key="batch.raw",
            setup=lambda: reset_caught_up(raw.db), rounds_full=40, warmup=2,
            args=(BATCH,), events=BATCH)
    raw.close()
