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
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from sessionstate.facade.gateway import Gateway
from .pgserver import ThrowawayServer
from .watched_load import (CATCH_UP_SECONDS, TARGETS, WATCHER, Acknowledged, await_ready, finish,
                           spawn, wait_caught_up, watch_targets)


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


def check_restart_outcome(gw: Gateway, acknowledged: list[Acknowledged], delivered: list[str]) -> list[str]:
    """The table against what the writers were told, and the notices against duplicates."""
    out: list[str] = []
    rows: dict[int, tuple[str, str]] = {}
    for target in TARGETS:
        key, agent = gw.ops.resolve(target, None)
        for event in gw.store.events_after(key, agent, 0, 10**9):
            rows[event.sequence] = (key, event.summary)
    given: Counter[int] = Counter()
    for ack in acknowledged:
        given[ack.sequence] += 1
        found = rows.get(ack.sequence)
        if found is None:
            out.append(f"acknowledged event {ack.sequence} ({ack.target} {ack.summary}) is lost")
        elif found != (ack.target, ack.summary):
            out.append(f"acknowledged sequence {ack.sequence} ({ack.target} {ack.summary}) was reissued to {found}")
    out += [f"sequence {s} was acknowledged {n} times" for s, n in given.items() if n > 1]
    twice = [text for text, n in Counter(delivered).items() if n > 1]
    out += [f"notice delivered {Counter(delivered)[t]} times: {t}" for t in twice]
    return out


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
            watch_targets(gw)
        acknowledged_log, delivered_log = Path(tmp) / "acknowledged", Path(tmp) / "delivered"
        for trial in range(trials):
            serving = spawn("restart_worker", "serve", server.url, str(delivered_log), WATCHER)
            writers = [spawn("restart_worker", "write", server.url, str(acknowledged_log), f"w{trial}.{n}",
                             str(rng.randrange(2**32)), *TARGETS) for n in (1, 2)]
            failures: list[str] = []
            try:
                for child in (serving, *writers):
                    await_ready(child)
                time.sleep(rng.uniform(*load_seconds))
                server.restart_immediately()
                time.sleep(rng.uniform(*load_seconds))
            finally:
                for n, writer in enumerate(writers, 1):
                    failures += finish(writer, f"writer {n}")[0]
                stopped = time.monotonic()
                with Gateway.open(server.url, serve=[]) as gw:
                    seconds = wait_caught_up(gw, stopped)
                    if seconds is not None:
                        report.catch_up_seconds.append(seconds)
                    else:
                        failures.append(f"the serving process did not catch the watcher up in {CATCH_UP_SECONDS:.0f} s")
                    failures += finish(serving, "serving process")[0]
                    acknowledged = [Acknowledged.parse(line) for line in
                                    acknowledged_log.read_text(encoding="utf-8").splitlines()]
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
