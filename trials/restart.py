"""Restart trials on PostgreSQL: ``pg_ctl -m immediate restart`` under load.

Two writer processes record events on two targets while a third, pumped process serves their
watcher and drains its notices. Mid-load the server is restarted immediately (every backend
killed, the committed work recovered from the WAL). After each trial, with the defaults:

- every append a writer was given a sequence for is in the table, on its session, with its
  own summary (nothing acknowledged lost; no sequence reissued to another event);
- no sequence was given out twice;
- no notice was delivered twice (a reissued history would repeat ``changesSince N``);
- the serving process catches the watcher up: once the writers stop, its cursors reach the
  heads (its feed and its main connection healed), within a generous bound.

The server is this module's own (``pgserver.ThrowawayServer``), tuned ``synchronous_commit =
off`` as the project's test servers are: the gateway must not depend on the server's tuning.
"""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from sessionstate.facade.gateway import Gateway
from . import worker, worker_env
from .pgserver import ThrowawayServer

WATCHER = "agent:watcher:main"
TARGETS = ("agent:target-one:main", "agent:target-two:main")
CATCH_UP_SECONDS = 30.0  # a bound for a stuck process, not a measurement
READY_SECONDS = 60.0


@dataclass
class RestartReport:
    trials: int = 0
    acknowledged: int = 0
    delivered: int = 0
    failures: list[str] = field(default_factory=list)
    catch_up_seconds: list[float] = field(default_factory=list)  # writers stopped -> watcher caught up
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures


def _spawn(*args: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        worker("restart_worker", *args), env=worker_env(),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    return child


def _await_ready(child: subprocess.Popen[str]) -> None:
    assert child.stdout is not None
    line = child.stdout.readline()
    if line.strip() != "ready":
        _, err = child.communicate(timeout=READY_SECONDS)
        raise RuntimeError(f"a restart worker did not start: {err[-2000:]}")


def _finish(child: subprocess.Popen[str], role: str) -> list[str]:
    """Tell a worker to stop; what it reported if it failed."""
    try:
        _, err = child.communicate("stop\n", timeout=READY_SECONDS)
    except subprocess.TimeoutExpired:
        child.kill()
        _, err = child.communicate()
        return [f"the {role} did not stop: {err[-2000:]}"]
    return [] if child.returncode == 0 else [f"the {role} failed ({child.returncode}): {err[-2000:]}"]


def check_restart_outcome(gw: Gateway, acknowledged: list[str], delivered: list[str]) -> list[str]:
    """The table against what the writers were told, and the notices against duplicates."""
    out: list[str] = []
    rows: dict[int, tuple[str, str]] = {}
    for target in TARGETS:
        key, agent = gw.ops.resolve(target, None)
        for event in gw.store.events_after(key, agent, 0, 10**9):
            rows[event.sequence] = (key, event.summary)
    given: Counter[int] = Counter()
    for line in acknowledged:
        sequence_text, target, summary = line.split()
        sequence = int(sequence_text)
        given[sequence] += 1
        found = rows.get(sequence)
        if found is None:
            out.append(f"acknowledged event {sequence} ({target} {summary}) is lost")
        elif found != (target, summary):
            out.append(f"acknowledged sequence {sequence} ({target} {summary}) was reissued to {found}")
    out += [f"sequence {s} was acknowledged {n} times" for s, n in given.items() if n > 1]
    twice = [text for text, n in Counter(delivered).items() if n > 1]
    out += [f"notice delivered {Counter(delivered)[t]} times: {t}" for t in twice]
    return out


def _caught_up(gw: Gateway) -> bool:
    for target in TARGETS:
        positions = gw.ops.cursor_positions(WATCHER, target)
        head = gw.ops.state_version(target)
        if positions is None or tuple(positions) != (head, head, head):
            return False
    return True


def run_restart_trials(
    trials: int,
    *,
    seed: int = 0,
    load_seconds: tuple[float, float] = (0.5, 1.5),
    progress: Callable[[int, int], object] | None = None,
) -> RestartReport:
    """``trials`` immediate restarts of a throwaway server, each under a fresh load."""
    started = time.monotonic()
    report = RestartReport()
    rng = random.Random(seed)
    with ThrowawayServer() as server, tempfile.TemporaryDirectory(prefix="sessionstate-restart-logs-") as tmp:
        with Gateway.open(server.url) as gw:
            gw.create_session(WATCHER)
            for target in TARGETS:
                gw.create_session(target)
                gw.watch(WATCHER, target)
        acknowledged_log, delivered_log = Path(tmp) / "acknowledged", Path(tmp) / "delivered"
        for trial in range(trials):
            serving = _spawn("serve", server.url, str(delivered_log), WATCHER)
            writers = [_spawn("write", server.url, str(acknowledged_log), f"w{trial}.{n}",
                              str(rng.randrange(2**32)), *TARGETS) for n in (1, 2)]
            failures: list[str] = []
            try:
                for child in (serving, *writers):
                    _await_ready(child)
                time.sleep(rng.uniform(*load_seconds))
                server.restart_immediately()
                time.sleep(rng.uniform(*load_seconds))
            finally:
                for n, writer in enumerate(writers, 1):
                    failures += _finish(writer, f"writer {n}")
                stopped = time.monotonic()
                with Gateway.open(server.url, serve=[]) as gw:
                    while not _caught_up(gw) and time.monotonic() - stopped < CATCH_UP_SECONDS:
                        time.sleep(0.05)
                    if _caught_up(gw):
                        report.catch_up_seconds.append(time.monotonic() - stopped)
                    else:
                        failures.append(f"the serving process did not catch the watcher up in {CATCH_UP_SECONDS:.0f} s")
                    failures += _finish(serving, "serving process")
                    acknowledged = acknowledged_log.read_text(encoding="utf-8").splitlines()
                    delivered = [line.split("\t", 1)[1] for line in
                                 delivered_log.read_text(encoding="utf-8").splitlines()]
                    failures += check_restart_outcome(gw, acknowledged, delivered)
            report.trials += 1
            report.acknowledged, report.delivered = len(acknowledged), len(delivered)
            report.failures += [f"trial {trial}: {f}" for f in failures]
            if progress is not None:
                progress(trial + 1, trials)
            if failures:
                break
    report.seconds = time.monotonic() - started
    return report


if __name__ == "__main__":  # pragma: no cover
    result = run_restart_trials(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    print(result)
    sys.exit(0 if result.ok else 1)
