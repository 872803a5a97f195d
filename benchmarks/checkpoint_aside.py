"""WAL checkpoints on the store's own thread against SQLite's autocheckpoint inside a commit, paired.

Run: ./dev run .venv/bin/python benchmarks/checkpoint_aside.py [--rounds 8] [--events 960]

Two gateways in one process, each on a file of its own set up as thread_scaling.py's (8 targets,
three watchers each). ``thread`` is a gateway as opened (``store/sqlite_checkpoint.py``: a
thread checkpoints after commits; the writer's autocheckpoint is an 8,000-page backstop);
``in_commit`` has that thread stopped and SQLite's default autocheckpoint (1,000 pages) back,
so the commit that fills the WAL checkpoints it, as before this store had the thread. Each
round runs, on both sides in turn (which side goes first alternates), N ``record_event`` calls
each timed alone, then N events as ``record_events`` of 8 on 8 targets. Printed per side: the
median over rounds of µs per event for both, the one-event calls' latency percentiles over
every round (a commit that checkpoints shows in the tail), and the ``-wal`` file's size at the
end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.environ.get("SESSIONSTATE_TREE", str(Path(__file__).resolve().parent.parent)))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from handover import burst_round, drained  # noqa: E402
from thread_scaling import KIND, open_side, target  # noqa: E402

SQLITE_DEFAULT_AUTOCHECKPOINT = 1_000
SLOTS = 8


def checkpoints_in_commit(gw) -> None:
    """Stop the store's checkpoint thread and give the writer SQLite's default autocheckpoint."""
    store = gw.store
    store.checkpointer.close()
    store.checkpointer = None
    store.pragma("wal_autocheckpoint", SQLITE_DEFAULT_AUTOCHECKPOINT)


def timed_calls(gw, events: int) -> list[float]:
    record, clock = gw.record_event, time.perf_counter
    latencies = []
    for i in range(events):
        began = clock()
        record(target(i % SLOTS), KIND, actor_type="human", summary="hello")
        latencies.append(clock() - began)
    drained(gw)
    return latencies


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def main() -> None:
    parser = argparse.ArgumentParser(description="background WAL checkpoints against checkpoints inside a commit, paired")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--events", type=int, default=960, help="events per side and kind of call in each round")
    parser.add_argument("--backstop", type=int, default=None,
                        help="the thread side's writer autocheckpoint in pages (default: the store's own)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sides = {name: open_side(f"sqlite:///{tmp}/{name}.db", SLOTS) for name in ("thread", "in_commit")}
        checkpoints_in_commit(sides["in_commit"])
        if options.backstop is not None:
            sides["thread"].store.pragma("wal_autocheckpoint", options.backstop)
        one: dict[str, list[float]] = {name: [] for name in sides}
        burst: dict[str, list[float]] = {name: [] for name in sides}
        calls: dict[str, list[float]] = {name: [] for name in sides}
        for name, gw in sides.items():  # warm-up, untimed
            timed_calls(gw, options.events // 4)
            burst_round(gw, options.events // 4)
        for round_number in range(options.rounds):
            order = list(sides) if round_number % 2 == 0 else list(reversed(sides))
            for name in order:
                latencies = timed_calls(sides[name], options.events)
                calls[name] += latencies
                one[name].append(sum(latencies) / len(latencies) * 1e6)
                burst[name].append(burst_round(sides[name], options.events) / options.events * 1e6)
        report: dict[str, object] = {"rounds": options.rounds, "events_per_round": options.events}
        for name, gw in sides.items():
            latencies = calls[name]
            report[name] = {
                "record_event_us": round(statistics.median(one[name]), 1),
                "burst8_us_per_event": round(statistics.median(burst[name]), 1),
                "call_us": {"p50": round(percentile(latencies, 0.5) * 1e6, 1),
                            "mean": round(statistics.mean(latencies) * 1e6, 1),
                            "p99": round(percentile(latencies, 0.99) * 1e6, 1),
                            "p999": round(percentile(latencies, 0.999) * 1e6, 1),
                            "max": round(max(latencies) * 1e6, 1)},
                "wal_mb": round(os.path.getsize(f"{tmp}/{name}.db-wal") / 1e6, 1),
            }
        for label, series in (("record_event", one), ("burst8", burst)):
            report[f"{label}_in_commit_over_thread"] = round(statistics.median(
                c / t for c, t in zip(series["in_commit"], series["thread"])), 2)
        for gw in sides.values():
            gw.close()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
