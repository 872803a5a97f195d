"""Where the time of several recording threads goes: the hand-over of group commit, paired.

Backs docs/performance-threads.md, "Where the time of several threads goes" and "The bound of a
sleeping hand-over".

Run: ./dev run .venv/bin/python benchmarks/studies/handover.py [--rounds R] [--events N] [--threads 2,4,8]
         [--synchronous NORMAL|FULL] [--no-gather]

One gateway (SQLite, one target per thread slot, three watchers each, as thread_scaling.py)
and, on a file of its own, raw ``sqlite3`` doing the same statements per event
(``_support.RawLog``: insert, head bump, caught-up read, cursor upsert). Each round runs, one
after the other and in this order, N notifying events

- ``raw``: raw sqlite3, one thread, one transaction per event (the baseline of every ratio);
- ``one``: one thread calling ``record_event`` (one transaction each: the group-commit path
  when nobody else records);
- ``burst8``: one thread calling ``record_events`` with 8 events per call (one transaction
  per 8, no thread hand-over at all: what 8 threads could reach at best);
- ``burst8_one_target``: the same with all 8 events of a call on one target (what the
  issue's quiet-machine table measured; ``burst8`` is what docs/performance-threads.md's "The ceiling of group
  commit" measured);
- ``tT`` for each thread count T: T threads calling ``record_event`` together;
- ``boundT`` for each T: about the best that any design can reach in which a caller sleeps
  until the commit that holds its event. T threads do nothing but queue an event and sleep
  on a bare lock of their own; one committer thread waits (on a bare lock, not polling) until
  all T have queued, records the T events with one ``record_events`` call and wakes each
  caller. So every batch holds exactly T events, a caller's Python is the least it can be, and
  validation and SQL are the burst's; what it costs beyond ``burst8`` is the hand-over itself
  (each caller put to sleep and woken once an event, the committer once a batch);
- ``boundT_prepared``: the same, but each caller validates its event as ``record_event`` does
  (``prepare_event``) and the committer hands the T events to the group commit as T callers
  (``record_prepared``): what is left between it and ``tT`` is the callers' way through
  ``record_event`` and the group commit's queue.

Ratios are taken round by round (each side against the same round's ``raw``) and their
median printed, so a slow phase of the shared machine falls on both sides of a ratio. For
the threaded sides it also prints, over every round, how the events were committed (batch
sizes: 1 is a call committed alone), for the calls that queued the median time from queueing
to the commit that held them and from that commit to the caller running again, and the
process's context switches per event (``getrusage``: voluntary ones are a thread going to
sleep on a lock or event, the interpreter's hand-overs included). For every side it prints the
process's CPU time per event, user and system (all threads: equal to the wall time when one
core did all the work).
"""

from __future__ import annotations

import _thread
import argparse
import collections
import itertools
import json
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, os.environ.get("SESSIONSTATE_TREE", str(HERE.parents[1])))  # the tree measured
sys.path.insert(0, str(HERE.parent))  # _support
sys.path.insert(0, str(HERE))  # thread_scaling

from _support import RawLog  # noqa: E402
from thread_scaling import KIND, WATCHERS, open_side, target  # noqa: E402

BURST = 8


def _switches() -> tuple[int, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw, usage.ru_nivcsw


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def cpu_timed(side, *args):
    """``side(*args)``'s result and the process's (user, system) CPU seconds meanwhile."""
    u0, s0 = _cpu()
    result = side(*args)
    u1, s1 = _cpu()
    return result, (u1 - u0, s1 - s0)


def raw_round(raw: RawLog, events: int, slots: int) -> float:
    record, began = raw.record, time.perf_counter()
    for i in range(events):
        record(target(i % slots))
    elapsed = time.perf_counter() - began
    raw.db.execute("UPDATE session_watch_cursors SET last_seen_sequence = notified_sequence")  # untimed: drained
    return elapsed


def drained(gw) -> None:
    for watcher in WATCHERS:
        gw.drain_system_events(watcher)


def one_round(gw, events: int, slots: int) -> float:
    record, began = gw.record_event, time.perf_counter()
    for i in range(events):
        record(target(i % slots), KIND, actor_type="human", summary="hello")
    elapsed = time.perf_counter() - began
    drained(gw)
    return elapsed


def burst_round(gw, events: int, one_target: bool = False) -> float:
    burst = [{"session_key": target(0 if one_target else i), "kind": KIND, "actor_type": "human", "summary": "hello"}
             for i in range(BURST)]
    record, began = gw.record_events, time.perf_counter()
    for _ in range(events // BURST):
        record(burst)
    elapsed = time.perf_counter() - began
    drained(gw)
    return elapsed


def run_together(workers: list[threading.Thread], barrier: threading.Barrier) -> tuple[float, tuple[int, int]]:
    """Start ``workers`` and, once ``barrier`` lets this thread through with the ones that wait
    there, time them until the last one ends: seconds, and the process's (voluntary,
    involuntary) context switches meanwhile."""
    for worker in workers:
        worker.start()
    barrier.wait()
    v0, i0 = _switches()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - began
    v1, i1 = _switches()
    return elapsed, (v1 - v0, i1 - i0)


def threads_round(gw, threads: int, events: int) -> tuple[float, tuple[int, int]]:
    per_thread = events // threads
    barrier = threading.Barrier(threads + 1)

    def work(index: int) -> None:
        key, record = target(index), gw.record_event
        barrier.wait()
        for _ in range(per_thread):
            record(key, KIND, actor_type="human", summary="hello")

    elapsed, switches = run_together([threading.Thread(target=work, args=(i,)) for i in range(threads)], barrier)
    drained(gw)
    return elapsed, switches


def bound_round(gw, threads: int, events: int, prepared: bool = False) -> tuple[
        float, tuple[int, int], collections.Counter[int]]:
    """``threads_round`` for the bound (module docstring): its time, its context switches,
    and the calls by the size of the commit that held them (all of them in batches of T).
    ``prepared``: each caller validates its event (``prepare_event``) and the committer hands
    the batch to the group commit as one caller each (``record_prepared``)."""
    per_thread = events // threads
    queue: collections.deque[tuple[dict, Any]] = collections.deque()
    all_queued = _thread.allocate_lock()
    all_queued.acquire()
    counted = itertools.count(1)  # next() is one step for the interpreter: one caller gets each number
    barrier = threading.Barrier(threads + 1)
    sizes: collections.Counter[int] = collections.Counter()
    failures: list[BaseException] = []

    def record(batch: list) -> list:
        if prepared:
            return [waiter.outcome()[0] for waiter in gw.ops.record_prepared([[event] for event in batch])]
        return gw.record_events(batch)

    def committer() -> None:
        for _ in range(per_thread):
            all_queued.acquire()  # released by the T-th caller to queue
            batch = [queue.popleft() for _ in range(threads)]
            try:
                if None in record([event for event, _ in batch]):
                    raise RuntimeError("a bound batch was not recorded")
                sizes[len(batch)] += len(batch)
            except BaseException as exc:  # the callers are released all the same: no hang
                failures.append(exc)
            for _, woken in batch:
                woken.release()

    def caller(index: int) -> None:
        event: Any = {"session_key": target(index), "kind": KIND, "actor_type": "human", "summary": "hello"}
        prepare = gw.ops.prepare_event
        woken = _thread.allocate_lock()
        woken.acquire()
        barrier.wait()
        for _ in range(per_thread):
            queue.append((prepare(**event) if prepared else event, woken))
            if next(counted) % threads == 0:  # the batch's last to count: each counts after it queued
                all_queued.release()
            woken.acquire()

    workers = [threading.Thread(target=committer)]
    elapsed, switches = run_together(workers + [threading.Thread(target=caller, args=(i,)) for i in range(threads)],
                                     barrier)
    if failures:
        raise failures[0]
    drained(gw)
    return elapsed, switches, sizes


def main() -> None:
    parser = argparse.ArgumentParser(description="where the time of several recording threads goes, paired with raw sqlite3")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--events", type=int, default=480, help="events per side in each round")
    parser.add_argument("--threads", type=lambda text: [int(n) for n in text.split(",")], default=[2, 4, 8],
                        help="thread counts, comma-separated")
    parser.add_argument("--synchronous", default="NORMAL", help="SQLite's PRAGMA synchronous: NORMAL or FULL")
    parser.add_argument("--no-gather", action="store_true",
                        help="GroupCommit.gather off: no giving the interpreter away after a shared batch")
    options = parser.parse_args()
    rounds, events, counts, synchronous = options.rounds, options.events, options.threads, options.synchronous
    slots = max(counts + [BURST])
    with tempfile.TemporaryDirectory() as tmp:
        open_side(f"sqlite:///{tmp}/raw.db", slots, synchronous).close()
        raw = RawLog(Path(tmp) / "raw.db")
        raw.db.execute(f"PRAGMA synchronous = {synchronous}")
        gw = open_side(f"sqlite:///{tmp}/gw.db", slots, synchronous)
        group = gw.ops.group  # the gateway's GroupCommit (its counters and probes)
        if options.no_gather:
            group.gather = False
        timed = hasattr(group, "timings")
        seconds: dict[str, list[float]] = collections.defaultdict(list)
        ratios: dict[str, list[float]] = collections.defaultdict(list)
        sizes: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
        to_commit: dict[str, list[float]] = collections.defaultdict(list)
        to_wake: dict[str, list[float]] = collections.defaultdict(list)
        switches: dict[str, list[float]] = collections.defaultdict(list)
        user: dict[str, list[float]] = collections.defaultdict(list)
        system: dict[str, list[float]] = collections.defaultdict(list)
        raw_round(raw, events // 4, slots), one_round(gw, events // 4, slots), burst_round(gw, events // 4)
        for _ in range(rounds):
            sides, cpu = {}, {}
            for name, side, args in (("raw", raw_round, (raw, events, slots)), ("one", one_round, (gw, events, slots)),
                                     ("burst8", burst_round, (gw, events)),
                                     ("burst8_one_target", burst_round, (gw, events, True))):
                sides[name], cpu[name] = cpu_timed(side, *args)
            for threads in counts:
                name = f"t{threads}"
                log: list[tuple[float, float, float, int]] = []
                if timed:
                    group.timings = log
                (sides[name], (voluntary, involuntary)), cpu[name] = cpu_timed(threads_round, gw, threads, events)
                if timed:
                    group.timings = None
                    queued = len(log)
                    for queued_at, committed_at, woken_at, size in log:
                        to_commit[name].append(committed_at - queued_at)
                        to_wake[name].append(woken_at - committed_at)
                    alone = events // threads * threads - queued
                    sizes[name][1] += alone
                    for *_, size in log:
                        sizes[name][size] += 1
                switches[name].append((voluntary + involuntary) / events)
                for name, prepared in ((f"bound{threads}", False), (f"bound{threads}_prepared", True)):
                    (sides[name], (voluntary, involuntary), held), cpu[name] = cpu_timed(
                        bound_round, gw, threads, events, prepared)
                    switches[name].append((voluntary + involuntary) / events)
                    sizes[name].update(held)
            for name, elapsed in sides.items():
                seconds[name].append(elapsed)
                user[name].append(cpu[name][0])
                system[name].append(cpu[name][1])
                ratios[name].append(sides["raw"] / elapsed)  # throughput relative to raw
        report: dict[str, object] = {"synchronous": synchronous, "rounds": rounds,
                                     "events_per_round": events, "gather": group.gather if timed else None,
                                     "tree": os.environ.get("SESSIONSTATE_TREE", "this")}
        for name in seconds:
            point: dict[str, object] = {
                "events_per_s": round(events / statistics.median(seconds[name])),
                "us_per_event": round(statistics.median(seconds[name]) / events * 1e6, 1),
                "throughput_vs_raw": round(statistics.median(ratios[name]), 2),
                # the process's CPU (all its threads) per event: above the wall time, two cores worked
                "cpu_us_per_event": {"user": round(statistics.median(user[name]) / events * 1e6, 1),
                                     "system": round(statistics.median(system[name]) / events * 1e6, 1)},
            }
            if name.startswith(("t", "bound")):
                point["vs_burst8"] = round(statistics.median(
                    b / s for b, s in zip(seconds["burst8"], seconds[name])), 2)
                point["switches_per_event"] = round(statistics.median(switches[name]), 2)
                if sizes[name] and name.startswith("bound"):
                    point["calls_by_batch_size"] = dict(sorted(sizes[name].items()))
                if timed and to_commit[name]:
                    point["queued_to_commit_us"] = round(statistics.median(to_commit[name]) * 1e6)
                    point["commit_to_running_us"] = round(statistics.median(to_wake[name]) * 1e6)
                    point["calls_by_batch_size"] = dict(sorted(sizes[name].items()))
            report[name] = point
        gw.close()
        raw.close()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
