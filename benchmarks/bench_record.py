"""Recording events: one material event per transaction, and bursts of 500 per transaction.

Every round starts from the same state: the watchers that should be caught up are put back
to caught up (as a drain would leave them) and the in-memory queue is emptied, untimed. The
timed call then pays for the whole decision: insert, head bump, caught-up lookup, a `freeze`
per caught-up watcher, the cursor upsert and the commit (plus, for the project, validation,
the session lookup and queueing the notices).

Each benchmark times its two sides in the same rounds, alternately (``_support.paired``),
each side on a file of its own (a commit on a shared file would make the other side's
connection drop its page cache).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from sessionstate import Gateway
from _support import (
    KIND,
    TARGET,
    RawLog,
    build_log_file,
    clear_queue,
    make_pending,
    open_gateway,
    paired,
    reset_caught_up,
    scaled,
    side_connection,
    watcher_key,
)

EVENT = {"actor_type": "human", "summary": "hello"}
BATCH = scaled(500, 50)
PENDING = scaled(1_000, 50)


def _file(directory: Path, watchers: int, pending_after_first: bool = False) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / "record.db"
    build_log_file(path, rows=1_000, sessions=10, watchers=watchers)
    if pending_after_first:
        raw = RawLog(path)
        make_pending(raw.db, skip=watcher_key(0))
        raw.close()
    return path


def _reset(gw: Gateway, watcher: str | None = None) -> Callable[[], None]:
    """The untimed setup of a round: the watchers back to caught up, the queue emptied."""

    def setup() -> None:
        reset_caught_up(side_connection(gw), watcher=watcher)
        clear_queue(gw)

    return setup


@pytest.mark.parametrize("watchers", [1, 3])
def test_record(benchmark, tmp_path, watchers):
    """The project's ``record_event`` against ``RawLog.record``."""
    gw = open_gateway(_file(tmp_path / "project", watchers))
    raw = RawLog(_file(tmp_path / "raw", watchers))
    paired(benchmark, gw.record_event, raw.record, key=f"record.w{watchers}.project", rounds_full=2000,
           setup_project=_reset(gw), setup_other=lambda: reset_caught_up(raw.db),
           args=(TARGET, KIND), kwargs=EVENT)
    assert len(gw.ops.diagnostics().queued) == watchers
    raw.close()
    gw.close()


@pytest.mark.parametrize("watchers", [1, 3])
def test_record_traced(benchmark, tmp_path, watchers):
    """The same with the protocol trace on (an event line, a step and a notice line per
    watcher) against the same gateway setup with it off."""
    traced = open_gateway(_file(tmp_path / "traced", watchers), trace=tmp_path / "trace.jsonl")
    plain = open_gateway(_file(tmp_path / "plain", watchers))
    paired(benchmark, traced.record_event, lambda: plain.record_event(TARGET, KIND, **EVENT),
           key=f"record.w{watchers}.traced", other_name="project", rounds_full=2000,
           setup_project=_reset(traced), setup_other=_reset(plain), args=(TARGET, KIND), kwargs=EVENT)
    assert (tmp_path / "trace.jsonl").stat().st_size > 0
    traced.close()
    plain.close()


def test_record_pending(benchmark, tmp_path):
    """1 caught-up watcher plus PENDING watchers already holding a notice on the target,
    against raw SQL on the same cursors."""
    gw = open_gateway(_file(tmp_path / "project", PENDING + 1, pending_after_first=True))
    raw = RawLog(_file(tmp_path / "raw", PENDING + 1, pending_after_first=True))
    paired(benchmark, gw.record_event, raw.record, key="record.pending.project", rounds_full=2000,
           setup_project=_reset(gw, watcher_key(0)),
           setup_other=lambda: reset_caught_up(raw.db, watcher=watcher_key(0)),
           args=(TARGET, KIND), kwargs=EVENT, pending=PENDING)
    gw.close()
    raw.close()


def test_record_pending_vs_one_watcher(benchmark, tmp_path):
    """The same pending watchers against the project recording with 1 caught-up watcher only:
    what the pending watchers cost the project (R7 keeps it flat)."""
    gw = open_gateway(_file(tmp_path / "pending", PENDING + 1, pending_after_first=True))
    one = open_gateway(_file(tmp_path / "one", 1))
    paired(benchmark, gw.record_event, lambda: one.record_event(TARGET, KIND, **EVENT),
           key="record.pending.vs_one", other_name="one", rounds_full=2000,
           setup_project=_reset(gw, watcher_key(0)), setup_other=_reset(one),
           args=(TARGET, KIND), kwargs=EVENT, pending=PENDING)
    gw.close()
    one.close()


def test_batch(benchmark, tmp_path):
    """BATCH events through ``Gateway.record_events`` (validated up front, appended in one
    transaction, notices queued after the commit) against ``RawLog.record_batch``."""
    gw = open_gateway(_file(tmp_path / "project", 3))
    raw = RawLog(_file(tmp_path / "raw", 3))
    burst = [dict(session_key=TARGET, kind=KIND, **EVENT) for _ in range(BATCH)]
    result = paired(benchmark, gw.record_events, raw.record_batch, key="batch.project", rounds_full=40,
                    warmup=2, setup_project=_reset(gw), setup_other=lambda: reset_caught_up(raw.db),
                    args=(burst,), other_args=(BATCH,), events=BATCH)
    assert len(result) == BATCH and None not in result
    raw.close()
    gw.close()
