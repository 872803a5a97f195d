"""One concurrency process: ``python -m trials.concurrency_worker DB OUT SEED EVENTS START INDEX N``.

Waits until the wall clock reaches START (so both processes begin together), then appends
EVENTS events to any session (plus watches and drains of the watchers process INDEX of N
owns, no pruning) and writes what it saw to OUT as JSON:
the acknowledged ``(sequence, session)`` pairs, the gateway's stats, and any exception that
escaped to the caller (there must be none).
"""

from __future__ import annotations

import json
import random
import sys
import time
import traceback

from sessionstate.facade.gateway import Gateway
from .workload import ensure_sessions, one_step, owned_pairs


def main(argv: list[str]) -> int:
    db, out, seed, events, start = argv[0], argv[1], int(argv[2]), int(argv[3]), float(argv[4])
    pairs = owned_pairs(int(argv[5]), int(argv[6]))
    rng = random.Random(seed)
    acknowledged: list[tuple[int, str]] = []
    escaped: list[str] = []
    with Gateway.open(db) as gw:
        ensure_sessions(gw)
        time.sleep(max(0.0, start - time.time()))
        began = time.monotonic()
        while len(acknowledged) < events and len(escaped) < 5:
            try:
                one_step(gw, rng, lambda seq, key: acknowledged.append((seq, key)), prune=False, pairs=pairs)
            except Exception:  # noqa: BLE001 -- counted: nothing may escape to a caller
                escaped.append(traceback.format_exc(limit=3))
        seconds = time.monotonic() - began
        stats = dict(gw.ops.stats)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump({"acknowledged": acknowledged, "escaped": escaped, "stats": stats, "seconds": seconds}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
