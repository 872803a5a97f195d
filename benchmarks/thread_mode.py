"""What the first thread of a process costs the one-thread record path.

Run: ./dev run .venv/bin/python benchmarks/thread_mode.py [--rounds R] [--events N]

One gateway on an SQLite file (``auto_prune=False``, no ``on_wake``, no pump: it starts no
thread of its own), a target with three main-style watchers, each event followed by their
drains (untimed), as in ``append_cost.py``. Two processes run the same rounds: in one a
thread is started and joined half-way (it does nothing and is gone before the second half),
in the other nothing happens there. Printed per process: the median µs of ``record_event`` in
each half, and the second half over the first. A process that has once run a second thread
stays in the C library's and the interpreter's multi-thread mode (locks that a
single-threaded process skips), so the first process's ratio is the price of any thread:
the change pump, the wake timer, R30's prune timer, the async API's worker.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.environ.get("SESSIONSTATE_TREE", str(Path(__file__).resolve().parent.parent)))

NOW = 1_800_000_000.0
TARGET = "agent:main:subagent:target"
WATCHERS = ("agent:w1:main", "agent:w2:main", "agent:w3:main")


def child(start_thread: bool, rounds: int, events: int) -> None:
    from sessionstate import Gateway

    with tempfile.TemporaryDirectory() as tmp:
        gw = Gateway.open(f"sqlite:///{tmp}/bench.db", clock=lambda: NOW, auto_prune=False)
        for watcher in WATCHERS:
            gw.create_session(watcher)
        gw.create_session(TARGET, kind="subagent", parent=WATCHERS[0])
        for watcher in WATCHERS:
            gw.watch(watcher, TARGET)

        def round_median() -> float:
            times = []
            for _ in range(events):
                began = time.perf_counter()
                gw.record_event(TARGET, "human_direct_message", actor_type="human", summary="hello")
                times.append(time.perf_counter() - began)
                for watcher in WATCHERS:
                    gw.drain_system_events(watcher)
            return statistics.median(times) * 1e6

        round_median()  # warm-up
        if threading.active_count() != 1:
            sys.exit("thread_mode: the gateway started a thread of its own")
        first = [round_median() for _ in range(rounds)]
        if start_thread:
            thread = threading.Thread(target=lambda: None)
            thread.start()
            thread.join()
        second = [round_median() for _ in range(rounds)]
        gw.close()
    a, b = statistics.median(first), statistics.median(second)
    label = "a thread came and went" if start_thread else "no thread (control)"
    print(f"  {label:24} first half {a:6.1f} µs, second half {b:6.1f} µs: {b / a:.3f}", flush=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        child(argv[1] == "thread", int(argv[2]), int(argv[3]))
        return 0
    options = {"--rounds": "15", "--events": "200"}
    for name in options:
        if name in argv:
            options[name] = argv[argv.index(name) + 1]
    print(f"median µs of record_event, {options['--rounds']} rounds of {options['--events']} events per half")
    for mode in ("thread", "none", "thread", "none"):
        subprocess.run([sys.executable, __file__, "--child", mode, options["--rounds"], options["--events"]], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
