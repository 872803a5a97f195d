"""A group commit's appends on PostgreSQL: one append statement per event against one for the batch.

Run: scripts/pg-test-server run ./dev run .venv/bin/python benchmarks/batch_append.py [--rounds R] [--sizes 2,8,32]

One store on a schema of its own, eight sessions. Per batch size N, each round times two
transactions alternately, each of N events spread over the eight sessions with their heads
locked first in key order (``lock_targets``, as the batch path does): ``loop`` appends with
``append_event`` one by one (one round trip each, what a batch did before), ``many`` with
``append_events`` (one statement). Printed as JSON: the median microseconds per transaction
of each side and the ratio many/loop.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from multiproc_latency import pg_schema  # noqa: E402
from sessionstate.statemachine import NOTIFYING_KINDS  # noqa: E402
from sessionstate.store import SessionRecord, Store  # noqa: E402
from sessionstate.store.factory import open_store  # noqa: E402

AGENT = "main"
KEYS = [f"agent:main:t{i}" for i in range(8)]


def rows(count: int) -> list[tuple]:
    return [(KEYS[i % len(KEYS)], AGENT, "compacted", "system", None, None, "s", None, 1.0, 1.0, None)
            for i in range(count)]


def sides(store: Store, count: int) -> dict[str, Callable[[], None]]:
    batch = rows(count)
    heads = {(key, AGENT) for key in KEYS}

    def loop() -> None:
        with store.transaction():
            store.lock_targets(heads)
            for row in batch:
                store.append_event(*row)

    def many() -> None:
        with store.transaction():
            store.lock_targets(heads)
            store.append_events(batch)

    return {"loop": loop, "many": many}


def main() -> None:
    parser = argparse.ArgumentParser(description="one append statement per event against one per batch, on PostgreSQL")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--sizes", type=lambda text: [int(n) for n in text.split(",")], default=[2, 8, 32],
                        help="events per transaction, comma-separated")
    options = parser.parse_args()
    rounds = options.rounds
    points = []
    with pg_schema() as url:
        store = open_store(url, notifying_kinds=NOTIFYING_KINDS)
        try:
            with store.transaction():
                for key in KEYS:
                    store.insert_session(SessionRecord(key, AGENT, "main", None, None, None, 1.0, 1.0))
            for count in options.sizes:
                timed: dict[str, list[float]] = {"loop": [], "many": []}
                calls = sides(store, count)
                for _ in range(rounds):
                    for name, call in calls.items():
                        start = time.perf_counter()
                        call()
                        timed[name].append(time.perf_counter() - start)
                loop, many = (statistics.median(timed[side]) * 1e6 for side in ("loop", "many"))
                points.append({"events": count, "loop_us": round(loop), "many_us": round(many),
                               "many_vs_loop": round(many / loop, 2)})
        finally:
            store.close()
    print(json.dumps({"rounds": rounds, "points": points}, indent=2))


if __name__ == "__main__":
    main()
