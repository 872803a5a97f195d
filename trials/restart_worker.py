"""The processes of a restart trial (``restart.py``), one role each; a line on stdin stops it.

- ``write URL LOG NAME SEED TARGET...``: records events on the targets until stopped,
  appending one line per acknowledged append (``sequence target summary time``,
  ``watched_load.Acknowledged``) to LOG, flushed before the next append: a line in LOG is an
  event whose sequence the caller was given.
- ``serve URL LOG WATCHER``: a pumped gateway serving the watcher; drains its notices until
  stopped, one line per delivered notice (``time<TAB>text``) in LOG.

Each prints ``ready`` when it has opened its gateway. A call that raises is a finding (R15
says recording returns ``None`` on a storage failure): it is written to stderr and the
process exits 3.
"""

from __future__ import annotations

import sys
import time
import traceback

from sessionstate.errors import StorageError
from sessionstate.facade.gateway import Gateway
from .watched_load import stop_on_line, write_until_stopped

DRAIN_PAUSE_SECONDS = 0.02


def write(url: str, log_path: str, name: str, seed: int, targets: list[str]) -> None:
    stopped = stop_on_line()
    with Gateway.open(url, serve=[]) as gw, open(log_path, "a", encoding="utf-8") as log:
        print("ready", flush=True)
        write_until_stopped(gw, log, name, seed, targets, stopped)


def serve(url: str, log_path: str, watcher: str) -> None:
    stop = stop_on_line()
    with Gateway.open(url, serve=[], pump=True) as gw, open(log_path, "a", encoding="utf-8") as log:
        gw.cluster.attach(watcher)
        print("ready", flush=True)
        while not stop.is_set():
            try:
                lines = gw.drain_system_events(watcher)
            except StorageError:  # the server is restarting: the next drain reconnects
                lines = []
            for line in lines:
                log.write(f"{time.time():.6f}\t{line}\n")
            log.flush()
            stop.wait(DRAIN_PAUSE_SECONDS)


def main(argv: list[str]) -> int:
    try:
        if argv[0] == "write":
            write(argv[1], argv[2], argv[3], int(argv[4]), argv[5:])
        elif argv[0] == "serve":
            serve(argv[1], argv[2], argv[3])
        else:
            raise SystemExit(f"unknown role {argv[0]!r}")
    except Exception:
        traceback.print_exc()
        return 3
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
