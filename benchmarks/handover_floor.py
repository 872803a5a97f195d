"""What one hand-over between two Python threads costs on this machine, with nothing else to do.

Run: ./dev run .venv/bin/python benchmarks/handover_floor.py [--trips 20000] [--rounds 3]

Two threads pass the turn back and forth ``trips`` times, each waking the other and going to
sleep until woken: on ``threading.Event`` (what ``GroupCommit``'s waiters slept on until
2026-12-04), on ``group_commit.Signal`` (what they sleep on now: Event's set, clear and wait on
one bare lock) and on bare ``_thread`` locks (the cheapest wake CPython has). Printed per
primitive, the median over rounds of the wall time and the process's CPU time (user and
system, both threads) per hand-over, i.e. per round trip halved. A caller of ``record_event``
that waits for another thread's commit is put to sleep once and woken once: one round trip of
this kind is the least its call can cost beyond the work of the event itself
(docs/performance.md, "The floor of a hand-over").
"""

from __future__ import annotations

import _thread
import argparse
import json
import os
import resource
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.environ.get("SESSIONSTATE_TREE", str(Path(__file__).resolve().parent.parent)))

from sessionstate.services.notice.group_commit import Signal  # noqa: E402


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def with_wakes(make: Callable[[], threading.Event | Signal], trips: int) -> None:
    """Ping-pong on two wakes that ``make`` builds, used as a queued caller uses its own: wait,
    clear, set the other's."""
    ping, pong = make(), make()

    def other() -> None:
        for _ in range(trips):
            ping.wait()
            ping.clear()
            pong.set()

    thread = threading.Thread(target=other)
    thread.start()
    for _ in range(trips):
        ping.set()
        pong.wait()
        pong.clear()
    thread.join()


def with_events(trips: int) -> None:
    with_wakes(threading.Event, trips)


def with_signals(trips: int) -> None:
    with_wakes(Signal, trips)


def with_locks(trips: int) -> None:
    ping, pong = _thread.allocate_lock(), _thread.allocate_lock()
    ping.acquire()
    pong.acquire()

    def other() -> None:
        for _ in range(trips):
            ping.acquire()
            pong.release()

    thread = threading.Thread(target=other)
    thread.start()
    for _ in range(trips):
        ping.release()
        pong.acquire()
    thread.join()


def measure(run: Callable[[int], None], trips: int) -> tuple[float, float, float]:
    """Seconds of wall, user and system time per hand-over."""
    u0, s0 = _cpu()
    began = time.perf_counter()
    run(trips)
    wall = time.perf_counter() - began
    u1, s1 = _cpu()
    hand_overs = 2 * trips
    return wall / hand_overs, (u1 - u0) / hand_overs, (s1 - s0) / hand_overs


def main() -> None:
    parser = argparse.ArgumentParser(description="the cost of one hand-over between two threads")
    parser.add_argument("--trips", type=int, default=20_000, help="round trips per round")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    report: dict[str, object] = {"trips": options.trips, "rounds": options.rounds}
    samples: dict[str, list[tuple[float, float, float]]] = {"event": [], "signal": [], "lock": []}
    for _ in range(options.rounds):
        samples["event"].append(measure(with_events, options.trips))
        samples["signal"].append(measure(with_signals, options.trips))
        samples["lock"].append(measure(with_locks, options.trips))
    for name, rows in samples.items():
        wall, user, system = (statistics.median(column) for column in zip(*rows))
        report[name] = {"wall_us": round(wall * 1e6, 1), "user_us": round(user * 1e6, 1),
                        "system_us": round(system * 1e6, 1), "cpu_us": round((user + system) * 1e6, 1)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
