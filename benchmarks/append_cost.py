"""Append cost of one tree against another: median ``record_event``, the trees in lockstep.

Run: ./dev run .venv/bin/python benchmarks/append_cost.py [--postgres] [--threaded] [--events N] [--runs R] TREE...
     scripts/pg-test-server run ./dev run .venv/bin/python benchmarks/append_cost.py --postgres . /tmp/before

A TREE is a directory holding a ``sessionstate`` package, such as this checkout (``.``) or an
older commit's (``git worktree add /tmp/before REV``). Each tree runs in a child process that
puts it first on ``sys.path`` and opens a fresh database of its own (an SQLite file, or a schema
of its own on the server named by SESSIONSTATE_TEST_PG_URL) with a target and three watchers,
caught up, made through the public API. The children take turns event by event: the parent
tells one child to record a turn of 20 notifying events (each timed, one transaction each)
and waits for their times before telling the next, so slow and fast phases of a shared machine, which last
seconds, fall on every tree alike. Between two of its events (untimed) each watcher of a
child drains, which puts its cursor back to caught up. Which tree goes first is shuffled each
round (a fixed order made the second tree several per cent faster here, whichever it was).
Printed per tree and run: the median; then the median over runs, and its ratio to the first
tree's. Run each comparison in both orders too: what is left of the order's effect cancels in
the geometric mean of the two.

``--threaded`` starts and joins a do-nothing thread in every child first, so that every tree
runs in the C library's multi-thread mode (docs/performance.md, "what a thread costs"): the
comparison is then of the code alone, whether or not a tree starts a thread of its own.

This is the figure behind "append cost must not rise by more than 5 %": the pytest benchmarks
compare one tree with raw SQL, this compares two trees on the same path.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

NOW = 1_800_000_000.0
TARGET = "agent:main:subagent:target"
WATCHERS = ("agent:w1:main", "agent:w2:main", "agent:w3:main")
KIND = "human_direct_message"  # notifying (R1): freezes every caught-up watcher
# Events per turn: long enough that a turn is not dominated by waking an idle process (on a
# virtual machine that alone adds hundreds of microseconds to the first event), short enough
# (tens of milliseconds) that the machine's phases fall on every tree alike.
TURN_EVENTS = 20
RNG_SEED = 20261202  # the rounds' orders: random, but the same for every invocation


def child(url: str, threaded: bool) -> None:
    """Serve the parent: one timed ``record_event`` per line read, its seconds written back
    (run in the child, on its tree's package). ``threaded``: a do-nothing thread is started and
    joined first, so every tree runs in the C library's multi-thread mode (see below)."""
    from sessionstate import Gateway

    if threaded:
        thread = threading.Thread(target=lambda: None)
        thread.start()
        thread.join()

    gw = Gateway.open(url, clock=lambda: NOW)
    try:
        for watcher in WATCHERS:
            gw.create_session(watcher)
        gw.create_session(TARGET, kind="subagent", parent=WATCHERS[0])
        for watcher in WATCHERS:
            gw.watch(watcher, TARGET)
        print("ready", flush=True)
        for _ in sys.stdin:
            times = []
            for _ in range(TURN_EVENTS):
                began = time.perf_counter()
                gw.record_event(TARGET, KIND, actor_type="human", summary="hello")
                times.append(time.perf_counter() - began)
                for watcher in WATCHERS:
                    gw.drain_system_events(watcher)
            print(json.dumps(times), flush=True)
    finally:
        gw.close()


def _start(tree: str, url: str, threaded: bool) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", tree, url, *(["--threaded"] if threaded else [])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        env={**os.environ, "PYTHONPATH": tree},
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        sys.exit(f"append_cost: the child on {tree} did not start")
    return proc


def _run(trees: list[str], urls: list[str], events: int, threaded: bool) -> list[float]:
    """One run: a child per tree, ``events`` events each in lockstep turns (the first tenth
    warms up); the median per tree, in the order given."""
    procs = [_start(tree, url, threaded) for tree, url in zip(trees, urls)]
    samples: list[list[float]] = [[] for _ in trees]
    try:
        rounds = random.Random(RNG_SEED)
        order = list(zip(trees, procs, samples))
        for _ in range(-(-(events + events // 10) // TURN_EVENTS)):
            rounds.shuffle(order)  # the tree going first in a round is faster or slower by
            for tree, proc, times in order:  # several per cent here: a new order each round
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write("go\n")
                line = proc.stdout.readline()
                if not line:
                    sys.exit(f"append_cost: the child on {tree} failed")
                times.extend(json.loads(line))
    finally:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
    return [statistics.median(times[events // 10:]) for times in samples]


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--child"]:
        sys.path.insert(0, args[1])
        child(args[2], "--threaded" in args[3:])
        return
    parser = argparse.ArgumentParser(description="median record_event of one tree against another, in lockstep")
    parser.add_argument("--postgres", action="store_true", help="on the server named by SESSIONSTATE_TEST_PG_URL")
    parser.add_argument("--threaded", action="store_true",
                        help="start and join a do-nothing thread in every child first (multi-thread mode)")
    parser.add_argument("--events", type=int, default=1_500, help="events per tree in each run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("trees", nargs="*", default=[str(Path(__file__).resolve().parent.parent)],
                        help="directories holding a sessionstate package (default: this checkout)")
    options = parser.parse_intermixed_args(args)  # options after the trees too, as before
    postgres, threaded, events, runs = options.postgres, options.threaded, options.events, options.runs
    trees = [str(Path(t).resolve()) for t in options.trees]
    medians: list[list[float]] = [[] for _ in trees]
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(runs):
            with ExitStack() as stack:
                if postgres:
                    from multiproc_latency import pg_schema

                    urls = [stack.enter_context(pg_schema()) for _ in trees]
                else:
                    urls = [f"sqlite:///{tmp}/run{run}-tree{n}.db" for n in range(len(trees))]
                for per_tree, median in zip(medians, _run(trees, urls, events, threaded)):
                    per_tree.append(median)
    first = statistics.median(medians[0])
    report = {
        "backend": "postgresql" if postgres else "sqlite",
        "threaded": threaded,
        "events": events,
        "trees": [
            {
                "tree": tree,
                "medians_us": [round(m * 1e6, 1) for m in per_tree],
                "median_us": round(statistics.median(per_tree) * 1e6, 1),
                "vs_first": round(statistics.median(per_tree) / first, 3),
            }
            for tree, per_tree in zip(trees, medians)
        ],
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
