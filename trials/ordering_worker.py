"""One process of the ordering trial (``ordering.py``):
``python -m trials.ordering_worker ROLE DB OUT SEED EVENTS INDEX WRITERS STOP START``.

A writer appends EVENTS events (to the shared targets and its own), drains and sweeps its own
watcher, and re-watches now and then; a reader polls ``changesSince`` on every target from
the largest sequence it has seen until the STOP file exists, then once more. Both wait until
the wall clock reaches START, and write what they saw to OUT as JSON.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from typing import Any

from sessionstate.facade.gateway import Gateway
from .ordering import SHARED, all_targets, own_target, watched_by, watcher

NOTIFYING = ("human_direct_message", "goal_changed")
LOG_ONLY = ("compacted", "run_completed")


def write(gw: Gateway, rng: random.Random, events: int, index: int, writers: int) -> dict[str, Any]:
    me = watcher(index)
    acknowledged: list[tuple[int, str]] = []
    escaped: list[str] = []
    targets = SHARED + (own_target(index),)
    actors = (None, me, watcher((index + 1) % writers))
    while len(acknowledged) < events and len(escaped) < 5:
        try:
            roll = rng.random()
            if roll < 0.75:
                target, actor = rng.choice(targets), rng.choice(actors)
                kind = rng.choice(NOTIFYING if rng.random() < 0.7 else LOG_ONLY)
                seq = gw.record_event(target, kind, actor_type="human" if actor is None else "agent",
                                      actor_id=actor, summary="ordering trial")
                if seq is not None:
                    acknowledged.append((seq, target))
            elif roll < 0.9:
                gw.drain_system_events(me)
            elif roll < 0.97:
                gw.ops.startup_sweep()  # re-materialises notices other processes' events opened
            else:
                target = rng.choice(watched_by(index, writers))
                gw.unwatch(me, target)
                gw.watch(me, target)
        except Exception:  # noqa: BLE001 -- counted: nothing may escape to a caller
            escaped.append(traceback.format_exc(limit=4))
    return {"acknowledged": acknowledged, "escaped": escaped, "append_failures": gw.ops.stats["append_failures"]}


def read(gw: Gateway, stop: str, writers: int) -> dict[str, Any]:
    seen: dict[str, list[int]] = {key: [] for key in all_targets(writers)}
    top = dict.fromkeys(seen, 0)
    violations: list[str] = []
    escaped: list[str] = []
    polls = 0
    last_round = False
    while True:
        if os.path.exists(stop):
            last_round = True  # one full pass after every writer finished
        for key in seen:
            try:
                since = top[key]
                while True:
                    changes = gw.session_status(key, changes_since=since)["stateChanges"]
                    polls += 1
                    sequences = [e["sequence"] for e in changes["events"]]
                    if sequences != sorted(sequences) or (sequences and sequences[0] <= since):
                        violations.append(f"{key}: page after {since} is {sequences[:10]}")
                    seen[key] += sequences
                    if sequences:
                        since = top[key] = max(top[key], sequences[-1])
                    if not changes["truncated"]:
                        break
            except Exception:  # noqa: BLE001 -- counted: nothing may escape to a caller
                escaped.append(traceback.format_exc(limit=4))
        if last_round or len(escaped) >= 5:
            break
    return {"seen": seen, "polls": polls, "violations": violations[:20], "escaped": escaped}


def main(argv: list[str]) -> int:
    role, db, out = argv[0], argv[1], argv[2]
    seed, events, index, writers = int(argv[3]), int(argv[4]), int(argv[5]), int(argv[6])
    stop, start = argv[7], float(argv[8])
    with Gateway.open(db) as gw:
        time.sleep(max(0.0, start - time.time()))
        if role == "writer":
            result = write(gw, random.Random(seed), events, index, writers)
        else:
            result = read(gw, stop, writers)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
