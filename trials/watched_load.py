"""The load the restart and failover trials put on PostgreSQL: writer processes recording on
two targets and a serving process for their watcher, each a worker stopped by a line on its
stdin. Both trials share it: the trial's side (the sessions, the writers' log lines, stopping a
worker, the watcher caught up) and the workers' (the stop line, the writer's loop).
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO

from sessionstate.facade.gateway import Gateway
from . import worker, worker_env

WATCHER = "agent:watcher:main"
TARGETS = ("agent:target-one:main", "agent:target-two:main")
WORKER_SECONDS = 60.0  # bounds for a stuck worker or server, not measurements
CATCH_UP_SECONDS = 30.0


# -- the trial's side -------------------------------------------------------------------------


@dataclass(frozen=True)
class Acknowledged:
    """One append a writer was given a sequence for (a line of its log)."""

    sequence: int
    target: str
    summary: str
    at: float  # time.time() just after the call returned

    @classmethod
    def parse(cls, line: str) -> "Acknowledged":
        sequence, target, summary, at = line.split()
        return cls(int(sequence), target, summary, float(at))


def spawn(module: str, *args: str) -> subprocess.Popen[str]:
    """Start a worker (``python -m trials.MODULE ARGS``), its three streams piped."""
    return subprocess.Popen(worker(module, *args), env=worker_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def watch_targets(gw: Gateway) -> None:
    """The watcher and the targets, each target watched."""
    gw.create_session(WATCHER)
    for target in TARGETS:
        gw.create_session(target)
        gw.watch(WATCHER, target)


def caught_up(gw: Gateway) -> bool:
    """Every pair's cursors at its target's head."""
    for target in TARGETS:
        positions = gw.ops.cursor_positions(WATCHER, target)
        head = gw.ops.state_version(target)
        if positions is None or tuple(positions) != (head, head, head):
            return False
    return True


def wait_caught_up(gw: Gateway, since: float) -> float | None:
    """Seconds from ``since`` (``time.monotonic()``) until the serving process has caught the
    watcher up; None if it has not within ``CATCH_UP_SECONDS``."""
    while not caught_up(gw) and time.monotonic() - since < CATCH_UP_SECONDS:
        time.sleep(0.05)
    return time.monotonic() - since if caught_up(gw) else None


def await_ready(child: subprocess.Popen[str], url: str | None = None) -> None:
    """Wait for a worker's ``ready``; ``url`` is sent first to a worker that reads its
    database's URL from stdin. A worker that does not start raises, with its stderr."""
    assert child.stdin is not None and child.stdout is not None
    if url is not None:
        child.stdin.write(url + "\n")
        child.stdin.flush()
    if child.stdout.readline().strip() != "ready":
        _, err = child.communicate(timeout=WORKER_SECONDS)
        raise RuntimeError(f"a worker did not start: {err[-2000:]}")


def stop(child: subprocess.Popen[str]) -> None:
    """Send a worker its stop line (nothing if it ended already: ``finish`` tells how)."""
    try:
        assert child.stdin is not None
        child.stdin.write("stop\n")
        child.stdin.flush()
    except (OSError, ValueError):
        pass


def finish(child: subprocess.Popen[str], role: str) -> tuple[list[str], str]:
    """Stop a worker and wait for its end: (what it reported if it failed, its stdout)."""
    stop(child)
    try:
        out, err = child.communicate(timeout=WORKER_SECONDS)
    except subprocess.TimeoutExpired:
        child.kill()
        _, err = child.communicate()
        return [f"the {role} did not stop: {err[-2000:]}"], ""
    if child.returncode != 0:
        return [f"the {role} failed ({child.returncode}): {err[-2000:]}"], out
    return [], out


# -- the workers' side ------------------------------------------------------------------------


def stop_on_line() -> threading.Event:
    """An event set when a line (or the end) comes on stdin: the trial's stop."""
    stopped = threading.Event()

    def wait_for_line() -> None:
        sys.stdin.readline()
        stopped.set()

    threading.Thread(target=wait_for_line, daemon=True).start()
    return stopped


def write_until_stopped(gw: Gateway, log: TextIO, name: str, seed: int, targets: list[str],
                        stopped: threading.Event) -> None:
    """Record human events on the targets until stopped, one ``Acknowledged`` line per
    acknowledged append, flushed before the next: a line in the log is an event whose
    sequence the caller was given."""
    rng = random.Random(seed)
    count = 0
    while not stopped.is_set():
        count += 1
        target = rng.choice(targets)
        summary = f"{name}-{count}"
        sequence = gw.record_event(target, "human_direct_message", actor_type="human", summary=summary)
        acknowledged = time.time()
        if sequence is None:  # R15: a failed append (the server restarting or failing over); the turn goes on
            time.sleep(0.01)
            continue
        log.write(f"{sequence} {target} {summary} {acknowledged:.6f}\n")
        log.flush()
        time.sleep(rng.uniform(0, 0.004))
