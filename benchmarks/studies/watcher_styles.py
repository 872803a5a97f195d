"""What a main-style watcher adds to an event inside its wake window (issue #35, R12).

Backs docs/performance.md, "Main-style and sub-agent watchers inside a window".

Run: ./dev run .venv/bin/python benchmarks/studies/watcher_styles.py [--rounds R] [--events N] [--watchers W]

Two gateways, each on an SQLite file of its own, with one target (a main session) and ``--watchers`` watchers
of it: main sessions (``agent:wI:main``, woken through ``on_wake``, R12) on one side,
sub-agent sessions (``agent:wI:subagent:s``, never woken) on the other. Both have the same
``on_wake`` hook and the same fixed clock, so after the first wake every main-style watcher is
inside its window for the whole run. Each timed event is a material event on the target that
finds every watcher caught up: it freezes each cursor, queues a notice for each, and on the
main side asks for a wake each window has already decided (owed, not sent). Between two timed
events each watcher drains (untimed), which puts it back to caught up. The sides take turns
round by round, the order alternating, with raw ``sqlite3`` (``_support.RawLog``: insert, head
bump, caught-up read and cursor upsert, one transaction) as the floor in the same rounds.

Printed: the median over rounds of the per-event microseconds on each side, main over
sub-agent (1.00 is the target: the window decided, nothing more to pay), and each over raw;
then the ratio of the two sides in each round (run back to back), its median and range, the
figure least moved by the machine's slow and fast phases.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.environ.get("SESSIONSTATE_TREE", str(Path(__file__).resolve().parent.parent)))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _support import AGENT, RawLog  # noqa: E402

from sessionstate import Gateway  # noqa: E402

NOW = 1_800_000_000.0
KIND = "human_direct_message"  # notifying (R1)
TARGET = f"agent:{AGENT}:main"  # a main session nobody spawned: its only watchers are the watched


class Side:
    def __init__(self, path: Path, style: str, watchers: int) -> None:
        self.woken = 0
        self.target = TARGET
        self.gw = Gateway.open(str(path), clock=lambda: NOW, on_wake=self._on_wake, auto_prune=False)
        self.gw.create_session(self.target)
        self.watchers = []
        for i in range(watchers):
            if style == "main":
                key = f"agent:w{i}:main"
                self.gw.create_session(key)
            else:
                parent = f"agent:w{i}:main"
                self.gw.create_session(parent)
                key = f"agent:w{i}:subagent:s"
                self.gw.create_session(key, kind="subagent", parent=parent)
            self.gw.watch(key, self.target)
            self.watchers.append(key)
        self._event()  # the first wake of each main-style watcher: its window opens
        self._drain()
        self.micros: list[float] = []

    def _on_wake(self, watcher: str, reason: str) -> None:
        self.woken += 1

    def _event(self) -> None:
        self.gw.record_event(self.target, KIND, actor_type="human", summary="bench")

    def _drain(self) -> None:
        for key in self.watchers:
            self.gw.drain_system_events(key)

    def run_round(self, events: int) -> None:
        record, target, clock = self.gw.record_event, self.target, time.perf_counter_ns
        spent = 0
        for _ in range(events):
            began = clock()
            record(target, KIND, actor_type="human", summary="bench")
            spent += clock() - began
            self._drain()
        self.micros.append(spent / events / 1000)

    def close(self) -> None:
        self.gw.close()


class Floor:
    def __init__(self, path: Path, watchers: int) -> None:
        self.target = TARGET
        with Gateway.open(str(path), clock=lambda: NOW, auto_prune=False) as gw:
            gw.create_session(self.target)
            for i in range(watchers):
                gw.create_session(f"agent:w{i}:main")
                gw.watch(f"agent:w{i}:main", self.target)
        self.raw = RawLog(path)
        self.micros: list[float] = []

    def run_round(self, events: int) -> None:
        db = self.raw.db
        spent = 0
        for _ in range(events):
            began = time.perf_counter_ns()
            self.raw.record(self.target)
            spent += time.perf_counter_ns() - began
            db.execute("UPDATE session_watch_cursors SET last_seen_sequence = material_sequence,"
                       " notified_sequence = material_sequence")  # drained: caught up again
        self.micros.append(spent / events / 1000)

    def close(self) -> None:
        self.raw.close()


def main(argv: list[str]) -> int:
    options = {"--rounds": "9", "--events": "200", "--watchers": "3"}
    for name in options:
        if name in argv:
            options[name] = argv[argv.index(name) + 1]
    rounds, events, watchers = (int(options[n]) for n in ("--rounds", "--events", "--watchers"))
    with tempfile.TemporaryDirectory(prefix="sessionstate-watcher-styles-") as tmp:
        sides = {"main": Side(Path(tmp) / "main.sqlite", "main", watchers),
                 "sub-agent": Side(Path(tmp) / "sub.sqlite", "sub-agent", watchers)}
        floor = Floor(Path(tmp) / "raw.sqlite", watchers)
        try:
            for i in range(rounds):
                order = list(sides.values())
                for side in order if i % 2 == 0 else reversed(order):
                    side.run_round(events)
                floor.run_round(events)
        finally:
            woken = {name: side.woken for name, side in sides.items()}
            sides_micros = {name: side.micros for name, side in sides.items()}
            for side in sides.values():
                side.close()
            floor.close()
    medians = {name: statistics.median(side.micros) for name, side in sides.items()}
    raw = statistics.median(floor.micros)
    print(f"{rounds} rounds of {events} events, {watchers} watchers caught up before each; median µs per event")
    for name, value in medians.items():
        print(f"  {name:9} watchers: {value:7.1f} µs  ({value / raw:.2f}× raw; on_wake called {woken[name]} times)")
    print(f"  raw sqlite3:        {raw:7.1f} µs")
    paired = [m / s for m, s in zip(sides_micros["main"], sides_micros["sub-agent"])]
    print(f"main ÷ sub-agent: {medians['main'] / medians['sub-agent']:.3f} of the medians; per round "
          f"(the two sides back to back) median {statistics.median(paired):.3f}, "
          f"range {min(paired):.3f}-{max(paired):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
