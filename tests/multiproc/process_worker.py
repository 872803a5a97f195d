"""Process B of ``test_processes.py``: serves the watcher, reports its notice and wake, then
drains on the test's signal. Talks JSON lines over stdin/stdout."""

from __future__ import annotations

import json
import sys
import time

from sessionstate import Gateway


def say(message: dict) -> None:
    print(json.dumps(message), flush=True)


def main(url: str, watcher: str, drains: int) -> None:
    wakes: list[list[str]] = []
    with Gateway.open(url, serve=[], pump=True, on_wake=lambda w, r: wakes.append([w, r])) as gw:
        gw.cluster.attach(watcher)
        say({"ready": True})
        deadline = time.monotonic() + 60
        while not (gw.pending_system_events(watcher) and wakes) and time.monotonic() < deadline:
            time.sleep(0.005)
        say({"pending": gw.pending_system_events(watcher), "wakes": wakes})
        sys.stdin.readline()  # go
        lines = []
        for _ in range(drains):
            lines.append(gw.drain_system_events(watcher))
        say({"drained": lines})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
