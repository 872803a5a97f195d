"""Thread scaling of ``record_event``: group commit against one commit per call, paired.

Backs docs/performance-threads.md, "Group commit".

Run: ./dev run .venv/bin/python benchmarks/studies/thread_scaling.py [--postgres] [--rounds R] [--events N]
         [--threads 1,2,4,8,16] [--switch-interval SECONDS] [--synchronous NORMAL|FULL]
     scripts/pg-test-server run ./dev run .venv/bin/python benchmarks/studies/thread_scaling.py --postgres

Two gateways, each on a database of its own, with one target session per thread (each
watched by three watchers) built through the public API. Per thread count, each round
starts T threads at a barrier; together they record N events (N/T each, every thread on its
own target, all notifying). On the ``group`` gateway the threads call ``record_event``, so
concurrent callers share transactions (group commit). On the ``serial`` gateway each call
holds the gateway's lock around it (``with gw.locked(): gw.record_event(...)``): nobody ever
queues, every call commits alone, which is what every call did before group commit. The
two sides alternate round by round (``serial`` first, then ``group``), so the slow and fast
phases of a shared machine fall on both alike. Between rounds (untimed) every watcher
drains, so each round starts with caught-up cursors.

Printed as JSON: per thread count and side, the median throughput over rounds (events/s),
the p50 and p99 call latency over every call of every round, and the ratio group/serial.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout

from sessionstate import Gateway  # noqa: E402

NOW = 1_800_000_000.0
KIND = "human_direct_message"  # notifying (R1)
WATCHERS = ("agent:w1:main", "agent:w2:main", "agent:w3:main")


def target(i: int) -> str:
    return f"agent:main:subagent:t{i}"


def open_side(url: str, targets: int, synchronous: str = "NORMAL") -> Gateway:
    gw = Gateway.open(url, clock=lambda: NOW, synchronous=synchronous)
    for watcher in WATCHERS:
        gw.create_session(watcher)
    for i in range(targets):
        gw.create_session(target(i), kind="subagent", parent=WATCHERS[0])
        for watcher in WATCHERS:
            gw.watch(watcher, target(i))
    return gw


def one_round(gw: Gateway, threads: int, events: int, serial: bool) -> tuple[float, list[float]]:
    """Wall seconds for ``events`` events over ``threads`` threads, and every call's latency."""
    per_thread = max(1, events // threads)
    barrier = threading.Barrier(threads + 1)
    latencies: list[list[float]] = [[] for _ in range(threads)]

    def work(index: int) -> None:
        key, mine = target(index), latencies[index]
        record, locked, clock = gw.record_event, gw.locked, time.perf_counter
        barrier.wait()
        for _ in range(per_thread):
            began = clock()
            if serial:
                with locked():
                    record(key, KIND, actor_type="human", summary="hello")
            else:
                record(key, KIND, actor_type="human", summary="hello")
            mine.append(clock() - began)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - began
    for watcher in WATCHERS:  # untimed: back to caught up for the next round
        gw.drain_system_events(watcher)
    return elapsed, [x for per in latencies for x in per]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description="thread scaling of record_event: group commit against one commit per call")
    parser.add_argument("--postgres", action="store_true", help="on the server named by SESSIONSTATE_TEST_PG_URL")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--events", type=int, default=480, help="events per round, over all threads")
    parser.add_argument("--threads", type=lambda text: [int(n) for n in text.split(",")], default=[1, 2, 4, 8, 16],
                        help="thread counts, comma-separated")
    parser.add_argument("--switch-interval", type=float, metavar="SECONDS",
                        help="the GIL's hand-over interval, sys.setswitchinterval (default: CPython's 5 ms)")
    parser.add_argument("--synchronous", default="NORMAL", help="the stores' durability level: NORMAL or FULL")
    options = parser.parse_args()
    postgres, rounds, events, counts = options.postgres, options.rounds, options.events, options.threads
    synchronous = options.synchronous
    if options.switch_interval is not None:
        sys.setswitchinterval(options.switch_interval)
    report: dict[str, object] = {"backend": "postgresql" if postgres else "sqlite", "events_per_round": events,
                                 "rounds": rounds, "switch_interval_s": sys.getswitchinterval(),
                                 "synchronous": synchronous, "points": []}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        if postgres:
            from multiproc_latency import pg_schema

            urls = {side: stack.enter_context(pg_schema()) for side in ("serial", "group")}
        else:
            urls = {side: f"sqlite:///{tmp}/{side}.db" for side in ("serial", "group")}
        sides = {side: stack.enter_context(open_side(url, max(counts), synchronous))
                 for side, url in urls.items()}
        for threads in counts:
            for side, gw in sides.items():  # warm-up round, not counted
                one_round(gw, threads, events // 4, side == "serial")
            throughput: dict[str, list[float]] = {"serial": [], "group": []}
            latency: dict[str, list[float]] = {"serial": [], "group": []}
            batches_before = sides["group"].ops.diagnostics().group_batches
            for _ in range(rounds):
                for side, gw in sides.items():
                    elapsed, calls = one_round(gw, threads, events, side == "serial")
                    throughput[side].append(len(calls) / elapsed)
                    latency[side].extend(calls)
            point: dict[str, object] = {"threads": threads}
            for side in sides:
                point[side] = {
                    "events_per_s": round(statistics.median(throughput[side])),
                    "p50_us": round(_percentile(latency[side], 0.50) * 1e6, 1),
                    "p99_us": round(_percentile(latency[side], 0.99) * 1e6, 1),
                }
            point["group_vs_serial"] = round(
                statistics.median(throughput["group"]) / statistics.median(throughput["serial"]), 2
            )
            point["shared_batches"] = sides["group"].ops.diagnostics().group_batches - batches_before
            report["points"].append(point)  # type: ignore[attr-defined]
            print(json.dumps(point), file=sys.stderr, flush=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
