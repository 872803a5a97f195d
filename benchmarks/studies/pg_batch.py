"""A ``record_events`` batch on PostgreSQL, one tree against another: µs per event and round
trips per batch at 1, 8 and 32 events per call, the trees in lockstep.

Backs docs/performance-postgres.md, "The batch pipelined" (also run as `benchmarks/compare.py pg-batch`).

Run: scripts/pg-test-server run ./dev run .venv/bin/python benchmarks/studies/pg_batch.py [--rounds R] [--sizes 1,8,32] [--latency MS] TREE...
     e.g. TREE... = . /tmp/before   (git worktree add --detach /tmp/before REV)

Each tree runs in a child process that puts it first on ``sys.path`` and opens a schema of
its own on the server named by SESSIONSTATE_TEST_PG_URL, with one target and three watchers
caught up on it (the shape of ``compare.py wall``). A round asks every child, in a shuffled
order, for one turn per batch size: 10 ``record_events`` calls of N notifying events each,
each call timed; between two calls (untimed) every watcher drains until nothing is left, so
each call finds its three watchers caught up and writes their cursors. The slow and fast phases
of a shared machine last seconds; a turn lasts milliseconds, so they fall on every tree alike.

Round trips: one untraced call first (a statement's first use prepares it in a round trip of
its own), then one traced call per size. A tree whose store has ``trace_round_trips`` counts
them from libpq's trace; an older tree sends one statement per round trip, so its
``trace_statements`` count is its round trips.

``--latency MS`` puts a relay (``latency_relay.relay``) between the children and the server
(TCP on 127.0.0.1 to the server's socket, in this process) that holds every chunk MS
milliseconds each way: a server across a network, where a round trip costs more than the work
around it. Without it the children talk to the server's Unix socket on the same two cores,
where a round trip costs little more than the CPU on both ends.

Printed as JSON: per tree and size the median µs per event over all calls, the round trips
and statements of a batch, and the ratio to the first tree's µs per event.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

NOW = 1_800_000_000.0
TARGET = "agent:main:subagent:target"
WATCHERS = ("agent:w1:main", "agent:w2:main", "agent:w3:main")
KIND = "human_direct_message"  # notifying (R1): freezes every caught-up watcher
CALLS_PER_TURN = 10
RNG_SEED = 20261202


def child(url: str) -> None:
    """Serve the parent: per line ``N``, ten timed ``record_events`` of N events, their
    seconds written back; per line ``trace N``, one call's round trips and statements."""
    from sessionstate import Gateway

    gw = Gateway.open(url, clock=lambda: NOW)
    try:
        for watcher in WATCHERS:
            gw.create_session(watcher)
        gw.create_session(TARGET, kind="subagent", parent=WATCHERS[0])
        for watcher in WATCHERS:
            gw.watch(watcher, TARGET)

        def catch_up() -> None:
            # A drain acknowledges up to the first event's notice and reopens one for the
            # batch's later events (R8); the second drain acknowledges those: caught up again.
            for watcher in WATCHERS:
                while gw.drain_system_events(watcher):
                    pass

        def events(n: int) -> list[dict[str, Any]]:
            return [{"session_key": TARGET, "kind": KIND, "actor_type": "human", "summary": f"e{i}"}
                    for i in range(n)]

        store = gw.store
        print("ready", flush=True)
        for line in sys.stdin:
            words = line.split()
            if words[0] == "trace":
                n = int(words[1])
                catch_up()
                gw.record_events(events(n))  # untraced: prepares what is new
                catch_up()
                with store.trace_statements() as sent:
                    gw.record_events(events(n))
                catch_up()
                trips = len(sent)
                if hasattr(store, "trace_round_trips"):
                    with store.trace_round_trips() as traced:
                        gw.record_events(events(n))
                    catch_up()
                    trips = len(traced)
                print(json.dumps({"statements": len(sent), "round_trips": trips}), flush=True)
                continue
            n = int(words[0])
            batch = events(n)
            times = []
            for _ in range(CALLS_PER_TURN):
                catch_up()
                began = time.perf_counter()
                gw.record_events(batch)
                times.append(time.perf_counter() - began)
            print(json.dumps(times), flush=True)
    finally:
        gw.close()


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--child"]:
        sys.path.insert(0, args[1])
        child(args[2])
        return
    parser = argparse.ArgumentParser(description="record_events batches on PostgreSQL, tree against tree")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--sizes", type=lambda text: [int(n) for n in text.split(",")], default=[1, 8, 32])
    parser.add_argument("--latency", type=float, default=0.0, help="ms each way through a delaying relay")
    parser.add_argument("trees", nargs="*", default=[str(Path(__file__).resolve().parent.parent)])
    options = parser.parse_args(args)
    rounds, sizes, latency = options.rounds, options.sizes, options.latency
    trees = [str(Path(t).resolve()) for t in options.trees]
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from latency_relay import relay
    from multiproc_latency import pg_schema
    from tree_children import ask, start

    samples: dict[tuple[int, int], list[float]] = {(t, n): [] for t in range(len(trees)) for n in sizes}
    trips: dict[tuple[int, int], dict[str, int]] = {}
    with ExitStack() as stack:
        urls = [stack.enter_context(pg_schema()) for _ in trees]
        if latency:
            urls = [relay(url, latency / 1000) for url in urls]
        procs = [start("pg_batch", tree, __file__, "--child", tree, url) for tree, url in zip(trees, urls)]
        try:
            for t, proc in enumerate(procs):
                for n in sizes:
                    trips[(t, n)] = ask("pg_batch", trees[t], proc, f"trace {n}")
            order = list(range(len(trees)))
            shuffle = random.Random(RNG_SEED)
            for round_ in range(rounds + 1):  # the first round warms up
                for n in sizes:
                    shuffle.shuffle(order)
                    for t in order:
                        times = ask("pg_batch", trees[t], procs[t], str(n))
                        if round_:
                            samples[(t, n)].extend(s / n for s in times)
        finally:
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait()
    report = {
        "rounds": rounds,
        "latency_ms_each_way": latency,
        "calls_per_size": rounds * CALLS_PER_TURN,
        "trees": [
            {
                "tree": tree,
                "sizes": {
                    str(n): {
                        "us_per_event": round(statistics.median(samples[(t, n)]) * 1e6, 1),
                        "vs_first": round(statistics.median(samples[(t, n)]) / statistics.median(samples[(0, n)]), 3),
                        **trips[(t, n)],
                    }
                    for n in sizes
                },
            }
            for t, tree in enumerate(trees)
        ],
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
