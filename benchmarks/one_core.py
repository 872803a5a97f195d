"""The hand-over on one core against the hand-over across cores, paired.

Run: ./dev run .venv/bin/python benchmarks/one_core.py [--invocations 5] [--threads 8]
         [--trips 20000] [--rounds 3] [--events 480]

Runs ``handover_floor.py`` and ``handover.py`` (one gateway, raw sqlite3 beside it, T threads
calling ``record_event``, and its bound: T callers that only queue, one committer) as child
processes, in turn in three placements: free to run on every CPU this process may use
(``all_cpus``); held to the first of them (``one_cpu``:
``os.sched_setaffinity`` in the child before it starts Python, as ``taskset -c`` does; every
thread it starts inherits the mask); and held there under the ``SCHED_BATCH`` policy too
(``one_cpu_batch``, as ``chrt -b 0`` does: a thread woken by another does not take the CPU from
it, so the waker runs on until it sleeps itself and the woken thread finds the interpreter
free). Each child takes its ratios against its own raw side, so the machine's slow phases fall
on both sides of a ratio; printed are the medians (and ranges) over the invocations of each
placement.

Why one core can be faster: a thread that wakes another on a different core goes through the
kernel's cross-CPU wake-up, and the woken one then waits for the interpreter that the waker
still holds; on one core the wake is a switch on the same CPU. Python runs one thread at a
time anyway, so a process whose recorders are threads loses little by keeping to one core,
and the figures say what it gains (docs/performance.md, "One core for the recording threads").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_child(script: str, args: list[str], placement: tuple[set[int] | None, bool]) -> dict:
    """``script``'s JSON report, run with its affinity set to the placement's CPUs (None: left
    as is) and, if it says so, under ``SCHED_BATCH``."""
    cpus, batch = placement

    def hold() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        if batch:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))

    done = subprocess.run([sys.executable, str(HERE / script), *args], capture_output=True, text=True,
                          preexec_fn=hold, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{script} failed:\n{done.stderr}")
    return json.loads(done.stdout)


def spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 2), "min": round(min(values), 2), "max": round(max(values), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description="the hand-over and T recording threads, on one core and on all")
    parser.add_argument("--invocations", type=int, default=5, help="children per placement and script")
    parser.add_argument("--threads", type=int, default=8, help="recording threads of handover.py")
    parser.add_argument("--trips", type=int, default=20_000, help="handover_floor.py's round trips per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds in each child")
    parser.add_argument("--events", type=int, default=480, help="handover.py's events per side in each round")
    options = parser.parse_args()
    allowed = sorted(os.sched_getaffinity(0))
    placements: dict[str, tuple[set[int] | None, bool]] = {
        "all_cpus": (None, False), "one_cpu": ({allowed[0]}, False), "one_cpu_batch": ({allowed[0]}, True)}
    floor_args = ["--trips", str(options.trips), "--rounds", str(options.rounds)]
    record_args = ["--rounds", str(options.rounds), "--events", str(options.events), "--threads", str(options.threads)]
    threads, bound = f"t{options.threads}", f"bound{options.threads}"
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in placements}
    for _ in range(options.invocations):
        for name, placement in placements.items():  # in turn, so a slow phase falls on each
            rows = samples[name]
            floor = run_child("handover_floor.py", floor_args, placement)
            for primitive in ("event", "signal", "lock"):
                rows.setdefault(f"{primitive}_hand_over_wall_us", []).append(floor[primitive]["wall_us"])
                rows.setdefault(f"{primitive}_hand_over_cpu_us", []).append(floor[primitive]["cpu_us"])
            record = run_child("handover.py", record_args, placement)
            rows.setdefault("raw_us_per_event", []).append(record["raw"]["us_per_event"])
            for side in ("one", "burst8", threads, bound, f"{bound}_prepared"):
                rows.setdefault(f"{side}_vs_raw", []).append(record[side]["throughput_vs_raw"])
            rows.setdefault(f"{threads}_us_per_event", []).append(record[threads]["us_per_event"])
            rows.setdefault(f"{threads}_switches_per_event", []).append(record[threads]["switches_per_event"])
            rows.setdefault(f"{bound}_us_per_event", []).append(record[bound]["us_per_event"])
    report: dict[str, object] = {
        "cpus_allowed": allowed,
        "invocations": options.invocations,
        "threads": options.threads,
        "placements": {name: {key: spread(values) for key, values in rows.items()} for name, rows in samples.items()},
    }
    free = samples["all_cpus"][f"{threads}_vs_raw"]
    for name in ("one_cpu", "one_cpu_batch"):
        # over the free placement, invocation by invocation (each a ratio to its own raw side)
        held = samples[name][f"{threads}_vs_raw"]
        report[f"{threads}_{name}_over_all_cpus"] = spread([h / f for f, h in zip(free, held)])
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
