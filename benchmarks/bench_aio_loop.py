"""The async API's loop: 100 tasks record events through ``AsyncGateway`` while a heartbeat
ticks every 0.5 ms on the same loop.

Timed (paired with raw ``sqlite3`` appending the same number of events on one thread, one
transaction per event): the whole recording. Reported beside it, not asserted: the loop
thread's own CPU time between two ticks (``time.thread_time``, what blocking the loop means;
time the machine gives other threads or processes is not the loop's), its largest value and
the wall-clock gaps, the largest over the rounds. The test suite checks the structural half
(no store call on the loop thread, tests/gateway/test_aio.py); this is the figure
docs/performance.md ("An async API") quotes.
"""

from __future__ import annotations

import gc
import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
from _support import paired, scaled

from sessionstate.facade.aio import AsyncGateway

TASKS = scaled(100, 10)
EVENTS = scaled(10_000, 200)
HEARTBEAT = 0.0005
MANAGER = "agent:main:main"
TARGETS = [f"agent:main:subagent:t{i}" for i in range(10)]
EVENT = {"actor_type": "human", "summary": "hello"}


def _async_recording(path: Path, gaps: dict[str, float]) -> None:
    async def main() -> None:
        async with await AsyncGateway.open(f"sqlite:///{path}", clock=lambda: 1_800_000_000.0) as gw:
            await gw.create_session(MANAGER)
            for key in TARGETS:
                await gw.create_session(key, kind="subagent", parent=MANAGER)
            # A full cyclic collection pauses whichever thread triggers it for as long as the
            # heap walk takes (57-73 ms here, mostly SQLAlchemy's import heap): no store work.
            gc.collect()
            gc.freeze()
            stop = anyio.Event()

            async def heartbeat() -> None:
                wall, cpu = time.perf_counter(), time.thread_time()
                while not stop.is_set():
                    await anyio.sleep(HEARTBEAT)
                    now_wall, now_cpu = time.perf_counter(), time.thread_time()
                    gaps["cpu"] = max(gaps.get("cpu", 0.0), now_cpu - cpu)
                    gaps["wall"] = max(gaps.get("wall", 0.0), now_wall - wall - HEARTBEAT)
                    wall, cpu = now_wall, now_cpu

            async def recorder(index: int) -> None:
                key = TARGETS[index % len(TARGETS)]
                for _ in range(EVENTS // TASKS):
                    await gw.record_event(key, "human_direct_message", **EVENT)

            async with anyio.create_task_group() as tasks:
                async with anyio.create_task_group() as recorders:
                    for i in range(TASKS):
                        recorders.start_soon(recorder, i)
                    tasks.start_soon(heartbeat)
                stop.set()

    try:
        anyio.run(main)
    finally:
        gc.unfreeze()


def _raw_recording(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, session TEXT, kind TEXT, body TEXT)")
    for i in range(EVENTS):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO events (session, kind, body) VALUES (?, ?, ?)",
                     (TARGETS[i % len(TARGETS)], "human_direct_message", "hello"))
        conn.execute("COMMIT")
    conn.close()


def test_aio_loop_gap(benchmark: Any, tmp_path: Path) -> None:
    gaps: dict[str, float] = {}
    rounds: list[int] = [0]

    def fresh() -> Path:
        rounds[0] += 1
        return tmp_path / f"round-{rounds[0]}"

    def project() -> None:
        _async_recording(fresh().with_suffix(".project.db"), gaps)

    def raw() -> None:
        _raw_recording(fresh().with_suffix(".raw.db"))

    paired(benchmark, project, raw, key="aio_record_100_tasks", rounds_full=3, warmup=0,
           tasks=TASKS, events=EVENTS)
    benchmark.extra_info.update(max_loop_cpu_gap_ms=round(gaps["cpu"] * 1e3, 2),
                                max_loop_wall_gap_ms=round(gaps["wall"] * 1e3, 2))
