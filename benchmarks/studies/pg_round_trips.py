"""PostgreSQL's write paths against the floor of one durable insert, through a latency relay.

Run: scripts/pg-test-server run ./dev run .venv/bin/python benchmarks/studies/pg_round_trips.py [--latency MS] [--rounds R]
     another tree's code: PYTHONPATH=TREE ... (the script's own directory comes first, then TREE)

The floor is bare psycopg on its own autocommit connection doing one
``INSERT INTO session_state_events ... RETURNING sequence`` (one round trip, its commit
included), through the same relay. Against it, in the same run, interleaved sample by sample
(a shared machine's slow phases fall on every path alike):

- ``record_steady``: ``record_event`` on a target whose three watchers are already pending
  (R7: nothing but the append, its head and the NOTIFY);
- ``record_freezes_3_main`` / ``record_freezes_3_sub``: ``record_event`` on a target whose
  three caught-up watchers it freezes, main-style (``agent:wN:main``, woken, R12) or
  sub-agent (``agent:main:subagent:wN``, never woken); every watcher drains, untimed, before;
  the gateway's clock stands still, so main-style watchers are inside their wake window;
- ``batch_8`` / ``batch_32``: ``record_events`` of N notifying events on the freezing target,
  its watchers drained (until empty) before (µs per call; per event in the JSON too);
- ``drain``: ``drain_system_events`` of a watcher owing one notice.

``--latency MS`` holds every chunk MS milliseconds each way (``latency_relay.relay``: TCP on
127.0.0.1 to the server's socket); 0 talks to the socket directly. Round trips of each path
are counted from libpq's trace (``trace_round_trips``). Printed as JSON: median µs per path,
its ratio to the floor's median, and its round trips.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from latency_relay import connect, relay  # noqa: E402  (beside this script)

NOW = 1_800_000_000.0
MAIN = ("agent:w1:main", "agent:w2:main", "agent:w3:main")
SUB = ("agent:main:subagent:w1", "agent:main:subagent:w2", "agent:main:subagent:w3")
T_MAIN, T_SUB, T_STEADY = "agent:main:subagent:tmain", "agent:main:subagent:tsub", "agent:main:subagent:tsteady"
KIND = "human_direct_message"


def measure(url: str, rounds: int) -> dict[str, Any]:
    from sessionstate import Gateway

    gw = Gateway.open(url, clock=lambda: NOW, notify_on_create=False, record_created=False,
                      on_wake=lambda watcher, reason: None)  # the clock stands still: inside a window
    raw = connect(url)
    try:
        for key in (*MAIN, *SUB, T_MAIN, T_SUB, T_STEADY):
            gw.create_session(key)
        for w in MAIN:
            gw.watch(w, T_MAIN)
            gw.watch(w, T_STEADY)
        for w in SUB:
            gw.watch(w, T_SUB)
        event = {"actor_type": "human", "summary": "hello"}
        gw.record_event(T_STEADY, KIND, **event)  # every watcher of T_STEADY pending from here on
        insert = ("INSERT INTO session_state_events (session_key, agent_id, kind, actor_type, summary,"
                  " occurred_at, recorded_at) VALUES (%s, 'main', 'compacted', 'human', 'floor', %s, %s)"
                  " RETURNING sequence")

        def floor() -> None:
            raw.execute(insert, ("agent:main:subagent:floor", NOW, NOW), prepare=True).fetchone()

        def drain_all(watchers: tuple[str, ...]) -> None:
            # Until nothing is left: a drain after several events leaves one follow-up (R8).
            for w in watchers:
                while gw.drain_system_events(w):
                    pass

        def batch(n: int) -> Callable[[], None]:
            events = [{"session_key": T_MAIN, "kind": KIND, **event} for _ in range(n)]
            return lambda: gw.record_events(events)

        paths: dict[str, tuple[Callable[[], Any], Callable[[], None] | None]] = {
            "floor_insert": (floor, None),
            "record_steady": (lambda: gw.record_event(T_STEADY, KIND, **event), None),
            "record_freezes_3_main": (lambda: gw.record_event(T_MAIN, KIND, **event), lambda: drain_all(MAIN)),
            "record_freezes_3_sub": (lambda: gw.record_event(T_SUB, KIND, **event), lambda: drain_all(SUB)),
            "batch_8": (batch(8), lambda: drain_all(MAIN)),
            "batch_32": (batch(32), lambda: drain_all(MAIN)),
            "drain": (lambda: gw.drain_system_events(MAIN[0]),
                      lambda: (drain_all(MAIN), gw.record_event(T_MAIN, KIND, **event))),  # one notice owed
        }
        trips: dict[str, int] = {}
        for name, (run, before) in paths.items():
            for _ in range(2):  # warm: first uses prepare their statements
                if before:
                    before()
                run()
            if before:
                before()
            if name == "floor_insert":
                trips[name] = 1
                continue
            with gw.store.trace_round_trips() as traced:  # type: ignore[attr-defined]
                run()
            trips[name] = len([t for t in traced if t])
        samples: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(rounds):
            for name, (run, before) in paths.items():
                if before:
                    before()
                began = time.perf_counter()
                run()
                samples[name].append(time.perf_counter() - began)
        floor_median = statistics.median(samples["floor_insert"])
        out: dict[str, Any] = {}
        for name, values in samples.items():
            median = statistics.median(values)
            row = {"median_us": round(median * 1e6, 1), "x_floor": round(median / floor_median, 2),
                   "round_trips": trips[name]}
            if name.startswith("batch_"):
                row["median_us_per_event"] = round(median * 1e6 / int(name.split("_")[1]), 1)
            out[name] = row
        out["main_vs_sub"] = round(statistics.median(samples["record_freezes_3_main"])
                                   / statistics.median(samples["record_freezes_3_sub"]), 3)
        return out
    finally:
        raw.close()
        gw.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.0, help="ms each way through a delaying relay")
    parser.add_argument("--rounds", type=int, default=200)
    options = parser.parse_args()
    from multiproc_latency import pg_schema

    with pg_schema() as url:
        if options.latency:
            url = relay(url, options.latency / 1000)
        result = measure(url, options.rounds)
    print(json.dumps({"latency_ms_each_way": options.latency, "rounds": options.rounds, **result}, indent=1))


if __name__ == "__main__":
    main()
