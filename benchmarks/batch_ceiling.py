"""The ceiling of group commit: what one transaction shared by 8 events can save at best.

Run: ./dev run .venv/bin/python benchmarks/batch_ceiling.py [--postgres] [--rounds R] [--events N]
         [--synchronous NORMAL|FULL]
     scripts/pg-test-server run ./dev run .venv/bin/python benchmarks/batch_ceiling.py --postgres

Group commit lets concurrent callers share a transaction, but every event's Python work and
its statements still run one at a time (the store has one connection, the interpreter one
GIL). So 8 threads can at best reach the throughput of ONE thread that records the same
events 8 to a transaction, with no hand-over between threads at all. This measures that
ceiling directly, single-threaded: ``record_event`` one call per event against
``record_events`` with bursts of 8 (each burst one transaction, each event on its own
target, three watchers each), in alternating rounds. In the same run it measures 8 threads
with one commit per call (``serial``, what every call did before group commit, as in
thread_scaling.py) and with group commit, so the issue's target (8 threads >= 3x serial) can
be set against the ceiling.

Printed as JSON: per-event microseconds of both single-thread sides (median over rounds),
the 8-thread events/s of both sides, the ceiling in events/s, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from thread_scaling import KIND, one_round, open_side, target  # noqa: E402

BURST = 8


def singles(gw, events: int) -> float:
    record, began = gw.record_event, time.perf_counter()
    for i in range(events):
        record(target(i % BURST), KIND, actor_type="human", summary="hello")
    return time.perf_counter() - began


def bursts(gw, events: int) -> float:
    burst = [{"session_key": target(i), "kind": KIND, "actor_type": "human", "summary": "hello"} for i in range(BURST)]
    record, began = gw.record_events, time.perf_counter()
    for _ in range(events // BURST):
        record(burst)
    return time.perf_counter() - began


def drained(gw) -> None:
    for watcher in ("agent:w1:main", "agent:w2:main", "agent:w3:main"):
        gw.drain_system_events(watcher)


def main() -> None:
    parser = argparse.ArgumentParser(description="the ceiling of group commit: one thread recording bursts of 8")
    parser.add_argument("--postgres", action="store_true", help="on the server named by SESSIONSTATE_TEST_PG_URL")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--events", type=int, default=480, help="events per side in each round")
    parser.add_argument("--synchronous", default="NORMAL", help="the store's durability level: NORMAL or FULL")
    options = parser.parse_args()
    postgres, rounds, events, synchronous = options.postgres, options.rounds, options.events, options.synchronous
    per_event: dict[str, list[float]] = {"singles": [], "bursts": []}
    threaded: dict[str, list[float]] = {"serial": [], "group": []}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        if postgres:
            from multiproc_latency import pg_schema

            url = stack.enter_context(pg_schema())
        else:
            url = f"sqlite:///{tmp}/one.db"
        with open_side(url, BURST, synchronous) as gw:
            singles(gw, events // 4), drained(gw), bursts(gw, events // 4), drained(gw)  # warm-up
            for _ in range(rounds):
                for side, run in (("singles", singles), ("bursts", bursts)):
                    per_event[side].append(run(gw, events) / events * 1e6)
                    drained(gw)
                for side in ("serial", "group"):
                    elapsed, calls = one_round(gw, BURST, events, side == "serial")
                    threaded[side].append(len(calls) / elapsed)
    single_us, burst_us = (statistics.median(per_event[s]) for s in ("singles", "bursts"))
    serial8, group8 = (statistics.median(threaded[s]) for s in ("serial", "group"))
    ceiling = 1e6 / burst_us
    print(json.dumps({
        "backend": "postgresql" if postgres else "sqlite", "synchronous": synchronous,
        "rounds": rounds, "events_per_round": events,
        "one_thread_us_per_event": {"singles": round(single_us, 1), "bursts_of_8": round(burst_us, 1)},
        "one_thread_events_per_s": round(1e6 / single_us),
        "ceiling_events_per_s": round(ceiling),
        "eight_threads_events_per_s": {"serial": round(serial8), "group": round(group8)},
        "target_events_per_s": round(3 * serial8),
        "ceiling_vs_target": round(ceiling / (3 * serial8), 2),
        "group_vs_ceiling": round(group8 / ceiling, 2),
    }, indent=2))


if __name__ == "__main__":
    main()
