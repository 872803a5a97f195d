"""Restart: the startup sweep over 10,000 cursors (1,000 behind), and memory per cursor.

The sweep is timed two ways: the whole ``Gateway.open`` (engine, ``create_all``, pragmas and
the sweep) and the sweep alone (``startup_sweep()`` on an open gateway whose cursors are owed
notices again). The baseline runs the sweep's SQL: one SELECT of the behind cursors with their
effective material watermark, one upsert per changed cursor, one transaction.

Memory is measured with ``tracemalloc`` outside any timed region: Python bytes held by an open
gateway per durable cursor (cursors live in SQLite, so this should be about zero for caught-up
cursors; a pending cursor holds one queued notice line), the file bytes per cursor, and the
number of ``transitions.Machine`` objects alive (the protocol builds exactly one per process).
"""

from __future__ import annotations

import gc
import shutil
import tracemalloc

import pytest
from _support import (
    side_connection,
    AGENT,
    NOW,
    RawLog,
    bulk_cursors,
    bulk_events,
    bulk_sessions,
    connect_raw,
    create_schema,
    measure,
    open_gateway,
    scaled,
    session_key,
    watcher_key,
)

CURSORS = scaled(10_000, 500)
BEHIND = CURSORS // 10
TARGETS = 10
MEMORY_CURSORS = scaled(100_000, 2_000)


def _build(path, cursors: int, behind: int, targets: int = TARGETS, rows: int = 20_000) -> None:
    """``cursors`` cursors: watchers w0.. each watching ``targets`` sessions; the first
    ``behind`` are pending with newer material events after their frozen watermark."""
    create_schema(path)
    db = connect_raw(path)
    watchers = cursors // targets
    keys = [session_key(i) for i in range(targets)]
    bulk_sessions(db, keys + [watcher_key(i) for i in range(watchers)])
    bulk_events(db, keys, rows)
    pairs = [(watcher_key(w), keys[t]) for w in range(watchers) for t in range(targets)]
    head = rows // 2
    bulk_cursors(db, pairs[:behind], (0, head, head))  # L < N = M stored, effective M > N
    if cursors > behind:
        bulk_cursors(db, pairs[behind:], (rows, rows, rows))  # caught up (>= every head)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


@pytest.fixture(scope="module")
def sweep_template(tmp_path_factory):
    path = tmp_path_factory.mktemp("sweep") / "sweep.db"
    _build(path, CURSORS, BEHIND)
    return path


def _copy(template, tmp_path, name="copy.db"):
    dest = tmp_path / name
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"{name}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(template, dest)
    return dest


def test_open_with_sweep_project(benchmark, sweep_template, tmp_path):
    state = {}

    def setup() -> None:
        if "gw" in state:
            state["gw"].close()
        state["path"] = _copy(sweep_template, tmp_path)

    def open_():
        state["gw"] = open_gateway(state["path"])
        return state["gw"]

    gw = measure(benchmark, open_, key="sweep.open.project", setup=setup, rounds_full=15, warmup=1,
                 cursors=CURSORS, behind=BEHIND)
    assert sum(len(gw.pending_system_events(watcher_key(w))) for w in range(CURSORS // TARGETS)) == BEHIND
    gw.close()


def test_sweep_project(benchmark, sweep_template, tmp_path):
    """The sweep alone: reopen nothing, re-run startup_sweep on a fresh copy each round."""
    state = {}

    def setup() -> None:
        if "gw" in state:
            state["gw"].close()
        path = _copy(sweep_template, tmp_path)
        # open with the sweep, then put the swept cursors back as they were on disk
        raw = connect_raw(path)
        before = raw.execute("SELECT * FROM session_watch_cursors").fetchall()
        raw.close()
        gw = open_gateway(path)
        db = side_connection(gw)
        with gw.store.transaction():
            db.execute("DELETE FROM session_watch_cursors")
            db.executemany("INSERT INTO session_watch_cursors VALUES (?, ?, ?, ?, ?, ?, ?, ?)", before)
        gw.ops.forget_queued()
        state["gw"] = gw

    def sweep():
        return state["gw"].ops.startup_sweep()

    n = measure(benchmark, sweep, key="sweep.project", setup=setup, rounds_full=15, warmup=1,
                cursors=CURSORS, behind=BEHIND)
    assert n == BEHIND
    state["gw"].close()


def test_sweep_raw(benchmark, sweep_template, tmp_path):
    state = {}

    def setup() -> None:
        if "raw" in state:
            state["raw"].close()
        state["raw"] = RawLog(_copy(sweep_template, tmp_path))

    n = measure(benchmark, lambda: state["raw"].sweep(), key="sweep.raw", setup=setup, rounds_full=15,
                warmup=1, cursors=CURSORS, behind=BEHIND)
    assert n == BEHIND
    state["raw"].close()


def _held_bytes(path) -> tuple[int, "object"]:
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.take_snapshot()
    gw = open_gateway(path)
    gw.record_event(session_key(0), "human_direct_message", actor_type="human", summary="hello")
    gc.collect()
    held = tracemalloc.take_snapshot().compare_to(base, "filename")
    tracemalloc.stop()
    return sum(stat.size_diff for stat in held), gw


def test_memory_per_cursor(benchmark, tmp_path):
    """Bytes held in Python per cursor (caught up, and pending), file bytes per cursor,
    Machine objects alive. The timed part is the open with all cursors pending."""
    from transitions import Machine

    from sessionstate.statemachine import MACHINE

    empty, caught, pending = tmp_path / "empty.db", tmp_path / "caught.db", tmp_path / "pending.db"
    _build(empty, 0, 0, targets=100, rows=2_000)
    _build(caught, MEMORY_CURSORS, 0, targets=100, rows=2_000)
    _build(pending, MEMORY_CURSORS, MEMORY_CURSORS, targets=100, rows=2_000)
    sizes = {}
    for name, path in (("empty", empty), ("caught", caught), ("pending", pending)):
        held, gw = _held_bytes(path)
        sizes[name] = held
        sizes[name + "_file"] = gw.store.pragma("page_count") * gw.store.pragma("page_size")
        if name == "pending":
            queued = sum(len(gw.pending_system_events(watcher_key(w))) for w in range(MEMORY_CURSORS // 100))
            assert queued == MEMORY_CURSORS
        gw.close()
    machines = [o for o in gc.get_objects() if isinstance(o, Machine)]
    info = {
        "cursors": MEMORY_CURSORS,
        "python_bytes_per_caught_up_cursor": (sizes["caught"] - sizes["empty"]) / MEMORY_CURSORS,
        "python_bytes_per_pending_cursor": (sizes["pending"] - sizes["empty"]) / MEMORY_CURSORS,
        "file_bytes_per_cursor": (sizes["caught_file"] - sizes["empty_file"]) / MEMORY_CURSORS,
        "machines_alive": len(machines),
        "machine_models": len(MACHINE.models),
        "machine_is_the_module_one": all(m is MACHINE for m in machines),
    }
    state = {}

    def setup() -> None:
        if "gw" in state:
            state["gw"].close()

    def open_():
        state["gw"] = open_gateway(pending)
        return state["gw"]

    measure(benchmark, open_, key="memory.open_pending", setup=setup, rounds_full=3, warmup=0, **info)
    state["gw"].close()
    assert info["machines_alive"] == 1
