"""The spec's trace checker (``sessionstate.verify.trace_check``) as the nemesis runs it: every
rule unchanged but LIV1's check, which gets two allowances.

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
- *Queue-only units*: a sweep that queues the follow-up notice of another process's drain
  reads the same commit key as that drain, and holds no step the merge could order it by; the
  merge may take it first, and INV4 then sees a notice for an L the pair has not reached yet
  (found at ``--seed 1 --nemesis-seconds 15``). Here a tied unit that queues a notice for a
  pair fits only where that pair is pending at the notice's L, so the merge orders it after
  the move it reacted to; checked as before once merged. Likewise a reset or a delete that
  found nothing left to remove (another process unwatched the pair at the same key) fits only
  where its session has no cursor left: a false R14 otherwise (``--seed 51018``, slow profile).
- *Clocks jumped apart*: spec 7a states LIV1 for gateways that share one time ("at most 1 s
  late"); with clocks ``skew`` seconds apart the same wake is late by up to that much more on
  paper. WAKE1 needs no allowance: the durable wake slot compares the same clock values the
  trace records.
"""

from __future__ import annotations

import bisect
import re
from typing import Any

from sessionstate.statemachine import derive_state
from sessionstate.statemachine.table import PENDING_STATES
from sessionstate.verify.trace_check import Summary, TraceChecker, _target
from sessionstate.verify.trace_read import Proc, TraceFile, TraceLine, Unit

_SINCE = re.compile(r"changesSince (\d+)\.$")


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

    def _fits(self, unit: Unit, overlay: dict[Any, Any]) -> bool:
        """``TraceChecker._fits``, and a notice the unit queues is for a pair pending at its L."""
        if not super()._fits(unit, overlay):
            return False
        own = self._outcome(unit)  # a unit's own steps come before the notices they open
        for line in unit.lines:
            if line.op in ("reset", "delete") and not self._leaves_none(line, own, overlay):
                return False
            if line.op != "notice" or line.data.get("queued") is not True:
                continue
            found = _SINCE.search(str(line.data.get("text", "")))
            try:
                pair = (line.data["watcher"], _target(line.data["target"]))
            except (KeyError, ValueError):
                return False
            positions = own[pair] if pair in own else overlay[pair] if pair in overlay else self.pairs.get(pair)
            if found is None or positions is None:
                continue
            if derive_state(positions) not in PENDING_STATES or positions.last_seen != int(found[1]):
                return False
        return True

    def _leaves_none(self, line: TraceLine, own: dict[Any, Any], overlay: dict[Any, Any]) -> bool:
        """A reset (delete) removes every cursor of its session: the unit fits only where the
        pairs it leaves standing are none (R14), its own steps applied."""
        try:
            session = line.data["session"]
            target = _target(session) if line.op == "delete" else None
        except (KeyError, ValueError):
            return False
        key = target[0] if target is not None else str(session)
        for pair in set(self.pairs) | set(overlay):
            positions = own[pair] if pair in own else overlay[pair] if pair in overlay else self.pairs.get(pair)
            if positions is not None and (pair[0] == key or (target is not None and pair[1] == target)):
                return False
        return True

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
