"""The spec's trace checker (``sessionstate.verify.trace_check``) as the nemesis runs it: every
rule unchanged but LIV1's check, which gets two allowances. (The tie-breaks the nemesis found,
spec 15.2's drain, prune, queue-only, reset and delete rules, live in the spec's checker.)

LIV1's check fires when a gateway's timer sends an owed wake due at ``now``: a watcher whose
notice that gateway holds since its own last wake, and whose window (its latest wake anywhere,
plus the window) ended more than 1 s before ``now``, was stranded.

- *The latest wake anywhere* is read from every trace, by its time, not only from the units
  merged so far. A wake is a queue-only unit: it reads the commit key it finds, so wakes of
  several processes tie with other units at one key, and spec 15.2's merge (by positions)
  cannot order them; the merge may hold another process's wake back behind the timer's line
  that the check judges. (Found by the nemesis, SQLite, ``--seed 3 --nemesis-seconds 8``: a
  watcher woken at t by one process, the other process's owed wake correctly due at t + window,
  and the check, not yet having merged the wake at t, reported the notice stranded.)
- *Clocks jumped apart*: spec 7a states LIV1 for gateways that share one time ("at most 1 s
  late"); with clocks ``skew`` seconds apart the same wake is late by up to that much more on
  paper. WAKE1 needs no allowance: the durable wake slot compares the same clock values the
  trace records.
"""

from __future__ import annotations

import bisect
from typing import Any

from sessionstate.verify.trace_check import Summary, TraceChecker
from sessionstate.verify.trace_read import Proc, TraceFile, TraceLine



class NemesisTraceChecker(TraceChecker):
    def __init__(self, skew: float) -> None:
        super().__init__()
        self.skew = skew
        self.every_wake: dict[str, list[float]] = {}  # per watcher, every wake's time in every trace

    def run(self, files: list[TraceFile], on_unit: Any = None) -> Summary:
        for trace in files:
            for line in trace.lines:
                if line.op == "wake":
                    self.every_wake.setdefault(str(line.data["watcher"]), []).append(float(line.data["at"]))
        for times in self.every_wake.values():
            times.sort()
        return super().run(files, on_unit)

    def _check_stranded(self, proc: Proc, now: float, line: TraceLine) -> None:
        """``TraceChecker._check_stranded`` with the two allowances of the module's doc."""
        for gateway, watcher in sorted(self.unwoken):
            times = self.wake_times.get(watcher)
            if gateway != proc or not times:
                continue
            every = self.every_wake.get(watcher, [])
            earlier = every[:bisect.bisect_right(every, now + self.skew)]
            latest = max([max(times)] + earlier[-1:])
            due = latest + self.windows[watcher]
            if now > due + 1.0 + self.skew:
                raise self.fail("LIV1", f"gateway {proc} holds a notice for {watcher} queued after its last wake;"
                                        f" its wake was due at {due} and is still not sent at {now}"
                                        f" (clocks up to {self.skew:.1f} s apart)", line)
