"""The child of the crash test: ``python -m trials.crash_worker DB SIDELOG SEED``.

Works on the database DB (a URL or a file path) until it is killed. Every append that ``record_event`` acknowledged
(it returned a sequence, so the transaction committed) is written to SIDELOG as
``<sequence> <session>`` and fsynced before the next operation starts.
"""

from __future__ import annotations

import os
import random
import sys

from sessionstate.facade.gateway import Gateway
from .workload import PAIRS, ensure_sessions, one_step

MAX_ROWS = 300  # small, so prune really deletes; the parent accounts for it by the watermark


def main(argv: list[str]) -> int:
    db, sidelog, seed = argv[0], argv[1], int(argv[2])
    rng = random.Random(seed)
    with open(sidelog, "a", encoding="utf-8") as log, Gateway.open(db, max_rows=MAX_ROWS) as gw:
        ensure_sessions(gw)
        for watcher, target in PAIRS:
            gw.watch(watcher, target)

        def acknowledge(seq: int, session: str) -> None:
            log.write(f"{seq} {session}\n")
            log.flush()
            os.fsync(log.fileno())

        print("ready", flush=True)
        while True:
            one_step(gw, rng, acknowledge, prune=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
