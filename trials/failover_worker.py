"""The processes of a failover trial (``failover.py``), one role each. The first line on stdin
is the database URL (the trial starts its workers while its servers start: importing takes
seconds on a loaded machine); the next line stops the worker.

- ``write LOG NAME SEED TARGET...``: records events on the targets until stopped, one line
  per acknowledged append (``sequence target summary time``, the time just after the call
  returned: ``watched_load.Acknowledged``) appended to LOG and flushed before the next append.
- ``serve LOG WATCHER``: a pumped gateway serving the watcher. After each drain it
  reconciles every delivered line as the agent would (``session_status changesSince N``,
  every page, retried until it answers): LOG gets ``D<TAB>time<TAB>line`` per delivered
  line (``U`` instead of ``D`` when the drain's commit answer was lost and its outcome stayed
  unknown, R29) and ``R<TAB>target<TAB>sequences`` per reconciliation (the sequences it
  returned).

Each prints ``ready`` once its gateway is open and, when stopped, one JSON line with how its
store resolved the commits whose answer was lost (R29). A call that raises where the spec
says it returns is a finding: written to stderr, exit status 3.
"""

from __future__ import annotations

import json
import re
import sys
import time
import traceback
from typing import Any

from sessionstate.errors import StorageError
from sessionstate.facade.gateway import Gateway
from .watched_load import stop_on_line, write_until_stopped

DRAIN_PAUSE_SECONDS = 0.02
RECONCILE_SECONDS = 60.0  # a bound for a stuck server, not a measurement
_SINCE = re.compile(r'session_status sessionKey "(?P<target>[^"]+)" changesSince (?P<since>\d+)\.$')


def _resolutions(gw: Gateway) -> dict[str, int]:
    return dict(getattr(gw.store, "commit_resolutions", {}))


def write(url: str, log_path: str, name: str, seed: int, targets: list[str]) -> dict[str, int]:
    stopped = stop_on_line()
    with Gateway.open(url, serve=[]) as gw, open(log_path, "a", encoding="utf-8") as log:
        print("ready", flush=True)
        write_until_stopped(gw, log, name, seed, targets, stopped)
        return _resolutions(gw)


def reconcile(gw: Gateway, target: str, since: int) -> list[int]:
    """Every sequence ``session_status changesSince since`` gives, page after page; retried
    (the server may be failing over) until it answers."""
    seen: list[int] = []
    deadline = time.monotonic() + RECONCILE_SECONDS
    while True:
        try:
            status: dict[str, Any] = gw.session_status(target, changes_since=since)
        except StorageError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
            continue
        changes = status["stateChanges"]
        page = [int(event["sequence"]) for event in changes["events"]]
        seen += page
        if not changes["truncated"] or not page:
            return seen
        since = page[-1]


def serve(url: str, log_path: str, watcher: str) -> dict[str, int]:
    stop = stop_on_line()
    with Gateway.open(url, serve=[], pump=True) as gw, open(log_path, "a", encoding="utf-8") as log:
        gw.cluster.attach(watcher)
        print("ready", flush=True)
        while not stop.is_set():
            unknown_before = _resolutions(gw).get("unknown", 0)
            try:
                lines = gw.drain_system_events(watcher)
            except StorageError:  # the server is failing over: the next drain reconnects
                lines = []
            # U: returned by a drain whose commit answer was lost and stayed unknown (R29).
            tag = "U" if _resolutions(gw).get("unknown", 0) > unknown_before else "D"
            for line in lines:
                log.write(f"{tag}\t{time.time():.6f}\t{line}\n")
                log.flush()
                found = _SINCE.search(line)
                if found is None:
                    raise AssertionError(f"a delivered line is not a stale notice: {line!r}")
                seen = reconcile(gw, found["target"], int(found["since"]))
                log.write(f"R\t{found['target']}\t{' '.join(map(str, seen))}\n")
                log.flush()
            stop.wait(DRAIN_PAUSE_SECONDS)
        return _resolutions(gw)


def main(argv: list[str]) -> int:
    try:
        url = sys.stdin.readline().strip()
        if not url:
            return 0  # the trial gave up before its servers were up
        if argv[0] == "write":
            resolutions = write(url, argv[1], argv[2], int(argv[3]), argv[4:])
        elif argv[0] == "serve":
            resolutions = serve(url, argv[1], argv[2])
        else:
            raise SystemExit(f"unknown role {argv[0]!r}")
    except Exception:
        traceback.print_exc()
        return 3
    print(json.dumps(resolutions), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
