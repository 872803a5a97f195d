"""Check protocol traces against the spec: ``sessionstate replay`` (spec section 15.4).

The checker replays the merged units against the compiled transition table (``fire``, the
same dispatch the gateway uses) and a small model of what a trace witnesses: each pair's
positions, each session's head and pruned watermark, and each gateway's notice queue. It never
re-encodes the protocol: legality, next positions and notices come from ``statemachine``.
The first violation stops the replay with the rule broken and the lines that led there.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from ..errors import ProtocolError
from ..shared.formats import notice_text
from ..shared.provenance import PROVENANCE_AMBIENT, PROVENANCES
from ..statemachine import NOTIFYING_KINDS, Positions, derive_state, fire
from ..statemachine.machine import DERIVED_EFFECTS, TRANSITION_TABLE
from ..statemachine.table import (
    CAUGHT_UP,
    DRAIN,
    LOG_ONLY_EVENT,
    MATERIAL_EVENT,
    PENDING_STATES,
    RESTART_SWEEP,
    SEED,
    SELF_EVENT,
    TRIGGERS,
)
from .trace_read import Proc, TraceFile, TraceLine, TraceOrderError, Unit, merge, units_of

Target = tuple[str, str]
Pair = tuple[str, Target]
EVENT_TRIGGERS = (MATERIAL_EVENT, SELF_EVENT, LOG_ONLY_EVENT)
HISTORY = 64  # lines kept per pair and overall for the report


class PrunedMark(NamedTuple):
    """An overlay key beside the pairs': the pruned watermark a tied unit leaves on a session."""

    session: Target


def _pairs_of(overlay: dict[Any, Any]) -> set[Any]:
    return {key for key in overlay if not isinstance(key, PrunedMark)}


class Violation(Exception):
    def __init__(self, rule: str, message: str, line: TraceLine | None, context: list[TraceLine]) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule
        self.message = message
        self.line = line
        self.context = context


@dataclass
class Summary:
    files: int = 0
    lines: int = 0
    units: int = 0
    steps: int = 0
    events: int = 0
    notices: int = 0
    pairs: set[Pair] = field(default_factory=set)
    processes: set[int] = field(default_factory=set)
    gateways: set[Proc] = field(default_factory=set)
    cut: list[str] = field(default_factory=list)
    resynced: int = 0  # pairs taken again from their next step after a gateway ended unclosed


def _positions(value: Any) -> Positions | None:
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 3 and all(isinstance(v, int) for v in value)):
        raise ValueError(f"positions must be [L, N, M] integers or null, not {value!r}")
    return Positions(*value)


def _target(value: Any) -> Target:
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise ValueError(f"a session must be [key, agent id], not {value!r}")
    return (value[0], value[1])


def event_trigger(kind: str, actor: str | None, watcher: str) -> str:
    """R1 and R2: which trigger an event fires for a watcher."""
    if kind not in NOTIFYING_KINDS:
        return LOG_ONLY_EVENT
    return SELF_EVENT if actor == watcher else MATERIAL_EVENT


class TraceChecker:
    def __init__(self) -> None:
        self.pairs: dict[Pair, Positions] = {}
        self.provenance: dict[Pair, str] = {}  # R25: from the seed lines that carry it
        self.watchers_of: dict[Target, set[str]] = {}  # the pairs above, by target
        self.targets_of: dict[str, set[Target]] = {}  # and by watcher
        self.moved_by: dict[Pair, Proc] = {}  # who last moved L, created or removed the pair
        self.heads: dict[Target, int] = {}
        self.pruned: dict[Target, int] = {}
        self.queues: dict[Proc, dict[Pair, list[str]]] = {}
        self.last_tx: dict[Proc, tuple[int, int]] = {}  # (transaction number, commit key)
        self.high_water = 0
        self.complete = False  # the traces start from an empty database: every pair is seen from birth
        # After a gateway's trace ends without its close line (a crash), its last committed
        # transaction may be missing (killed between COMMIT and the write): each pair is then
        # taken once more from its next step, and a pair never seen may appear (spec 15.3).
        self.resync: set[Pair] = set()
        self.lossy = False
        self._last_unit: dict[Proc, int] = {}
        self.summary = Summary()
        self._recent: deque[TraceLine] = deque(maxlen=HISTORY)
        self._pair_lines: dict[Pair, deque[TraceLine]] = {}
        # per unit
        self._event: TraceLine | None = None
        self._owed_steps: dict[Pair, tuple[int, str]] = {}  # caught-up pairs the event must fire on
        self._owed_notices: list[tuple[Pair, str]] = []
        self._drain_owed: dict[str, set[Pair]] = {}  # pending pairs a drain must deliver (R21)
        self._drained: dict[str, set[Pair]] = {}  # and the pairs it has delivered (INV10)
        self._swept: set[Pair] = set()
        # Wakes (R12, R23, LIV1, WAKE1): each watcher's recent wake times and window, and the
        # (gateway, watcher) whose queue there holds a notice queued after that gateway's own
        # last wake of the watcher.
        self.wake_times: dict[str, deque[float]] = {}
        self.windows: dict[str, float] = {}
        self.unwoken: set[tuple[Proc, str]] = set()
        self._owed_fired_at: float | None = None

    # -- driving ------------------------------------------------------------------------------

    def run(self, files: list[TraceFile], on_unit: Callable[[], None] | None = None) -> Summary:
        self.summary.files = len(files)
        self.summary.cut = [f"{f.source}:{c.lineno}" for f in files for c in f.cuts]
        try:
            by_proc = units_of(files)
        except TraceOrderError as exc:
            raise self.fail("T2", exc.message, exc.line) from None
        opens = [u.lines[0] for units in by_proc.values() for u in units if u.tx == 0 and u.lines[0].op == "open"]
        databases = sorted({str(line.data.get("db")) for line in opens})
        if len(databases) > 1:
            raise self.fail("T1", f"the traces record different databases {databases}: replay one database at a time",
                            opens[0])
        # A trace that starts with a gateway opening an empty log sees every pair from its seed.
        self.complete = bool(opens) and min(line.data["c"] for line in opens) == 0
        self._last_unit = {unit.proc: unit.tx for units in by_proc.values() for unit in units}  # in batch order
        for unit in merge(by_proc, self._fits, self._outcome):
            self._unit(unit)
            if on_unit is not None:
                on_unit()
        return self.summary

    def _fits(self, unit: Unit, overlay: dict[Any, Any]) -> bool:
        """Does ``unit`` start where the pairs are (``overlay`` over the replayed positions)?"""
        def current(pair: Any) -> Positions | None:
            return overlay[pair] if pair in overlay else self.pairs.get(pair)

        if any(line.op == "sweep" for line in unit.lines):
            swept = {pair for pair, trigger in self._unit_steps(unit) if trigger == RESTART_SWEEP}
            for pair in set(self.pairs) | _pairs_of(overlay):
                positions = current(pair)
                if positions is not None and derive_state(positions) in PENDING_STATES and pair not in swept:
                    return False
        own: dict[Any, Any] | None = None  # the unit's own steps come before the notices they open
        for line in unit.lines:
            if line.op == "prune" and not self._prune_fits(line, current, set(self.pairs) | _pairs_of(overlay), overlay):
                return False  # R7, R13: after the moves it read and the prunes that raised less
            if line.op in ("reset", "delete") or (line.op == "notice" and line.data.get("queued") is True):
                own = self._outcome(unit) if own is None else own
                if line.op != "notice" and not self._leaves_none(line, own, overlay):
                    return False  # R14: after another process's removal of the pairs it found gone
                if line.op == "notice" and not self._notice_fits(line, own, overlay):
                    return False  # INV4: a queue-only unit after the move it reacted to
        drained = {pair for pair, trigger in self._unit_steps(unit) if trigger == DRAIN}
        for watcher in {pair[0] for pair in drained}:  # R21: after any removal of a pair it skipped
            for pair in set(self.pairs) | _pairs_of(overlay):
                positions = current(pair)
                if (pair[0] == watcher and pair not in drained and pair not in self.resync and positions is not None
                        and derive_state(positions) in PENDING_STATES):
                    return False
        seen: set[Pair] = set()
        for line in unit.lines:
            if line.op != "step":
                continue
            try:
                pair = (line.data["watcher"], _target(line.data["target"]))
                before = _positions(line.data["before"])
            except (KeyError, ValueError):
                return False
            if pair in seen:
                continue
            seen.add(pair)
            if pair in overlay:  # where another tied unit left it
                if overlay[pair] != before:
                    return False
            elif pair in self.resync:
                continue  # its replayed positions are stale: it takes its next step as it is
            elif (pair in self.pairs or self.complete) and self.pairs.get(pair) != before:
                return False
        return True

    def _outcome(self, unit: Unit) -> dict[Any, Any]:
        """The positions a unit leaves on the pairs it steps, and the watermarks a prune
        leaves (for ordering tied units)."""
        after: dict[Any, Any] = {}
        for line in unit.lines:
            if line.op == "prune":
                try:
                    after.update({PrunedMark((str(k), str(a))): int(m) for k, a, m in line.data["heads"]})
                except (KeyError, ValueError, TypeError):
                    pass
            if line.op == "step":
                try:
                    after[(line.data["watcher"], _target(line.data["target"]))] = _positions(line.data["after"])
                except (KeyError, ValueError):
                    pass
        return after

    def _position(self, pair: Any, own: dict[Any, Any], overlay: dict[Any, Any]) -> Positions | None:
        return own[pair] if pair in own else overlay[pair] if pair in overlay else self.pairs.get(pair)

    def _notice_fits(self, line: TraceLine, own: dict[Any, Any], overlay: dict[Any, Any]) -> bool:
        """A queued notice's pair is pending at the notice's L."""
        try:
            pair = (line.data["watcher"], _target(line.data["target"]))
        except (KeyError, ValueError):
            return False
        positions = self._position(pair, own, overlay)
        if positions is None:
            return True  # checked when merged
        return (derive_state(positions) in PENDING_STATES
                and str(line.data.get("text")) == notice_text(pair[1][0], positions.last_seen))

    def _leaves_none(self, line: TraceLine, own: dict[Any, Any], overlay: dict[Any, Any]) -> bool:
        """A reset (delete) removes every cursor of its session: it fits only where the pairs
        it leaves standing are none (R14), its own steps applied."""
        try:
            session = line.data["session"]
            target = _target(session) if line.op == "delete" else None
        except (KeyError, ValueError):
            return False
        key = target[0] if target is not None else str(session)
        for pair in set(self.pairs) | _pairs_of(overlay):
            if self._position(pair, own, overlay) is not None and (
                    pair[0] == key or (target is not None and pair[1] == target)):
                return False
        return True

    def _prune_fits(self, line: TraceLine, current: Callable[[Any], Positions | None], pairs: set[Any],
                    overlay: dict[Any, Any]) -> bool:
        """A prune fits where each pending pair of its sessions stands where it wrote it (R7)
        and each watermark it left is at or above the session's (R13 only raises one)."""
        try:
            marks = {(str(key), str(agent)): int(mark) for key, agent, mark in line.data["heads"]}
            written = {(str(w), (str(key), str(agent))): _positions(p) for w, key, agent, p in line.data["cursors"]}
        except (KeyError, ValueError, TypeError):
            return False
        for session, mark in marks.items():
            if mark < overlay.get(PrunedMark(session), self.pruned.get(session, 0)):
                return False
        affected = set(marks)
        for pair in pairs | set(written):
            positions = current(pair)
            if (pair[1] in affected and positions is not None and pair not in self.resync
                    and derive_state(positions) in PENDING_STATES and written.get(pair) != positions):
                return False
        return True

    @staticmethod
    def _unit_steps(unit: Unit) -> list[tuple[Any, Any]]:
        return [((line.data.get("watcher"), tuple(line.data.get("target") or ())), line.data.get("trigger"))
                for line in unit.lines if line.op == "step"]

    def fail(self, rule: str, message: str, line: TraceLine | None, pair: Pair | None = None) -> Violation:
        if pair is not None and pair in self._pair_lines:
            context = list(self._pair_lines[pair])[-10:]
        else:
            context = list(self._recent)[-10:]
        return Violation(rule, message, line, context)

    def _unit(self, unit: Unit) -> None:
        proc = unit.proc
        s = self.summary
        s.units += 1
        s.processes.add(proc[0])
        s.gateways.add(proc)
        first = unit.lines[0]
        previous = self.last_tx.get(proc)
        if previous is None:
            if first.op != "open" and self.complete:
                raise self.fail("T2", f"gateway {proc} starts without its open line", first)
            self.queues.setdefault(proc, {})
        else:
            if unit.tx != previous[0] + 1:
                raise self.fail("T2", f"gateway {proc}: transaction {unit.tx} follows {previous[0]}"
                                      f" (expected {previous[0] + 1}: a batch lost or reordered)", first)
            if unit.commit_key < previous[1]:
                raise self.fail("T2", f"gateway {proc}: commit key {unit.commit_key} after {previous[1]}", first)
        self.last_tx[proc] = (unit.tx, unit.commit_key)
        self._event = None
        self._owed_steps = {}
        self._owed_notices = []
        self._drain_owed = {}
        self._drained = {}
        self._swept = set()
        self._owed_fired_at = None
        for line in unit.lines:
            s.lines += 1
            if line.data.get("c") != unit.commit_key:
                raise self.fail("T2", f"commit key {line.data.get('c')} inside a batch with key {unit.commit_key}", line)
            try:
                self._line(proc, line)
            except (KeyError, ValueError, TypeError) as exc:
                raise self.fail("T1", f"malformed {line.op!r} line: {exc!r}", line) from None
            self._recent.append(line)
        if unit.complete:
            self._close_unit(proc, unit)
        if self._owed_fired_at is not None:
            self._check_stranded(proc, self._owed_fired_at, unit.lines[-1])
        if self._last_unit.get(proc) == unit.tx and unit.lines[-1].op != "close":
            self.lossy = True  # this gateway ended without closing: it may have lost its last batch
            self.resync = set(self.pairs)

    def _close_unit(self, proc: Proc, unit: Unit) -> None:
        last = unit.lines[-1]
        self._close_event(last)
        if self._owed_notices:
            pair, text = self._owed_notices[0]
            raise self.fail("INV4", f"pair {_name(pair)} was left pending but its notice was never queued: {text!r}",
                            last, pair)
        for watcher, left in sorted(self._drain_owed.items()):
            if left:
                pair = sorted(left)[0]
                raise self.fail("R21", f"the drain of {watcher} delivered nothing for the pending pair {_name(pair)}",
                                last, pair)

    def _close_event(self, line: TraceLine) -> None:
        """The previous event of the unit is done: every caught-up pair must have been fired on."""
        if self._owed_steps:
            pair, (sequence, trigger) = next(iter(sorted(self._owed_steps.items())))
            raise self.fail("INV6", f"event {sequence} on {pair[1][0]} fires {trigger} for caught-up watcher"
                                    f" {pair[0]}, but the trace has no such step: the event is not covered",
                            line, pair)
        self._owed_steps = {}

    # -- lines --------------------------------------------------------------------------------

    def _line(self, proc: Proc, line: TraceLine) -> None:
        op = line.op
        handler = getattr(self, "_op_" + op, None)
        if handler is None:
            raise self.fail("T1", f"unknown op {op!r}", line)
        handler(proc, line)

    def _op_open(self, proc: Proc, line: TraceLine) -> None:
        self.queues[proc] = {}

    def _op_close(self, proc: Proc, line: TraceLine) -> None:
        self.queues.pop(proc, None)  # the in-memory queue ends with its gateway
        self.unwoken = {(p, w) for p, w in self.unwoken if p != proc}

    def _op_wake(self, proc: Proc, line: TraceLine) -> None:
        """WAKE1: no two wakes of one watcher, in any gateways, less than a window apart."""
        d = line.data
        watcher, at, window, owed = str(d["watcher"]), float(d["at"]), float(d["window"]), d["owed"]
        times = self.wake_times.setdefault(watcher, deque(maxlen=64))
        close = [t for t in times if abs(at - t) < window - 1e-6]
        if close:
            raise self.fail("WAKE1", f"{watcher} woken at {at} and at {close[-1]}, less than the {window} s"
                                     " window apart", line)
        times.append(at)
        self.windows[watcher] = window
        self.unwoken.discard((proc, watcher))
        if owed is True:
            due = float(d["due"])
            self._owed_fired_at = due if self._owed_fired_at is None else max(self._owed_fired_at, due)

    def _check_stranded(self, proc: Proc, now: float, line: TraceLine) -> None:
        """LIV1, seen from the gateway's wake timer firing an owed wake that fell due at
        ``now``: the timer fires in due order, so every watcher whose notice the gateway holds
        since after its own last wake, and whose window (the latest wake of it, anywhere, plus
        the window) ended more than 1 s before ``now``, was stranded."""
        for gateway, watcher in sorted(self.unwoken):
            times = self.wake_times.get(watcher)
            if gateway != proc or not times:
                continue
            due = max(times) + self.windows[watcher]
            if now > due + 1.0:
                raise self.fail("LIV1", f"gateway {proc} holds a notice for {watcher} queued after its last wake;"
                                        f" its wake was due at {due} and is still not sent at {now}", line)

    def _op_event(self, proc: Proc, line: TraceLine) -> None:
        self._close_event(line)
        d = line.data
        sequence, session, kind, actor = int(d["seq"]), _target(d["session"]), str(d["kind"]), d["actor"]
        self.summary.events += 1
        head = self.heads.get(session)
        if head is not None and sequence <= head:
            raise self.fail("INV7", f"state version of {session[0]} would go from {head} to {sequence}", line)
        if sequence <= self.high_water:
            raise self.fail("T2", f"event {sequence} after event {self.high_water}: sequences are assigned in commit order", line)
        if sequence > line.data["c"]:
            raise self.fail("T2", f"event {sequence} in a batch whose commit key is {line.data['c']}", line)
        self.high_water = sequence
        self.heads[session] = sequence
        self._event = line
        for watcher in sorted(self.watchers_of.get(session, ())):
            pair = (watcher, session)
            if pair in self.resync:
                continue  # its positions are taken again from its next step
            positions = self.pairs[pair]
            trigger = event_trigger(kind, actor, pair[0])
            state = derive_state(positions)
            if state == CAUGHT_UP and trigger != LOG_ONLY_EVENT:
                self._owed_steps[pair] = (sequence, trigger)  # the gateway fires these (R1, R2)
                continue
            # Pending pairs on an event, and log-only events: the derived effects (R7).
            dest, effect = TRANSITION_TABLE[(state, trigger)]
            if effect not in DERIVED_EFFECTS:
                raise self.fail("R7", f"{trigger} in {state} has effect {effect}, which the event path never writes",
                                line, pair)
            step = fire(pair, positions, trigger, sequence)
            self._put(pair, step.positions)
            self._note(pair, line)

    def _op_step(self, proc: Proc, line: TraceLine) -> None:
        d = line.data
        pair: Pair = (str(d["watcher"]), _target(d["target"]))
        trigger = str(d["trigger"])
        sequence = d["seq"]
        self.summary.steps += 1
        self.summary.pairs.add(pair)
        self._note(pair, line)
        if trigger not in TRIGGERS:
            raise self.fail("T1", f"unknown trigger {trigger!r}", line, pair)
        for name in ("before", "after"):
            try:
                positions = _positions(d[name])
                derive_state(positions)
            except ProtocolError:
                raise self.fail("INV1", f"{name} positions {d[name]} are not ordered (L <= N <= M, L = N only with"
                                        " N = M)", line, pair) from None
        before, after = _positions(d["before"]), _positions(d["after"])
        if trigger in EVENT_TRIGGERS:
            self._check_event_step(line, pair, trigger, sequence)
        known = pair in self.pairs or (self.complete and not self.lossy)
        if pair in self.resync:
            self.resync.discard(pair)
            if self.pairs.get(pair) != before:
                self.summary.resynced += 1
                known = False
        if known and self.pairs.get(pair) != before:
            raise self.fail("T3", f"step starts from {_fmt(before)} but the pair's last step left {_fmt(self.pairs.get(pair))}"
                                  " (a step lost, edited or out of order)", line, pair)
        state = derive_state(before)
        try:
            result = fire(pair, before, trigger, sequence)
        except ProtocolError as exc:
            raise self.fail("TABLE", str(exc), line, pair) from None
        except AssertionError:
            raise self.fail("T1", f"{trigger} needs a sequence", line, pair) from None
        effect = TRANSITION_TABLE[(state, trigger)][1]
        if d["effect"] != effect:
            raise self.fail("TABLE", f"{trigger} in {state} has effect {effect}, the line says {d['effect']!r}", line, pair)
        if result.positions != after:
            raise self.fail(f"EFFECT {effect}", f"{effect} takes {_fmt(before)} to {_fmt(result.positions)},"
                                                f" the line says {_fmt(after)}", line, pair)
        if d["notice"] != result.notice_since:
            if result.notice_since is None and trigger in (SELF_EVENT, LOG_ONLY_EVENT):
                raise self.fail("INV5", f"a {trigger} opened a notice (changesSince {d['notice']!r})", line, pair)
            raise self.fail(f"EFFECT {effect}", f"{effect} opens a notice with changesSince {result.notice_since!r},"
                                                f" the line says {d['notice']!r}", line, pair)
        expected_notice = None if result.notice_since is None else notice_text(pair[1][0], result.notice_since)
        head = self.heads.get(pair[1], 0 if self.complete else None)
        # After a crash the replayed head may lag one lost event: only below it is wrong.
        if trigger == SEED and before is None and head is not None and (sequence < head if self.lossy else sequence != head):
            raise self.fail("R4", f"seeded at {sequence}, but {pair[1][0]}'s state version is {head}", line, pair)
        if trigger == DRAIN:
            assert before is not None
            delivered = d.get("delivered")
            if delivered != notice_text(pair[1][0], before.last_seen):
                raise self.fail("R17", f"delivered {delivered!r}, but the durable cursor says changesSince"
                                       f" {before.last_seen}", line, pair)
            owed = self._drain_owed.get(pair[0])
            if owed is None:  # the drain's first step: every pending pair of the watcher is owed
                owed = self._drain_owed[pair[0]] = {
                    (pair[0], target) for target in self.targets_of.get(pair[0], ())
                    if derive_state(self.pairs[(pair[0], target)]) in PENDING_STATES
                    and (pair[0], target) not in self.resync
                }
            # A pair left out of ``owed`` because it was being resynchronised is still delivered
            # once: only a pair this drain already stepped is a second step.
            drained = self._drained.setdefault(pair[0], set())
            if pair in drained:
                raise self.fail("INV10", f"a second drain step for {_name(pair)} in one drain", line, pair)
            drained.add(pair)
            owed.discard(pair)
        if trigger == SEED:
            self._check_provenance(line, pair, before)
        if trigger == RESTART_SWEEP:
            self._swept.add(pair)
        self._put(pair, after)
        if before is None or after is None or before.last_seen != after.last_seen:
            self.moved_by[pair] = proc
        if expected_notice is not None:
            self._owed_notices.append((pair, expected_notice))

    def _check_event_step(self, line: TraceLine, pair: Pair, trigger: str, sequence: Any) -> None:
        event = self._event
        if event is None or event.data["seq"] != sequence or _target(event.data["session"]) != pair[1]:
            raise self.fail("T2", f"{trigger} step for event {sequence} on {pair[1][0]} does not follow that event",
                            line, pair)
        expected = event_trigger(event.data["kind"], event.data["actor"], pair[0])
        if trigger != expected:
            rule = "R1" if LOG_ONLY_EVENT in (trigger, expected) else "R2"
            raise self.fail(rule, f"event {sequence} ({event.data['kind']} by {event.data['actor']}) fires {expected}"
                                  f" for {pair[0]}, the line says {trigger}", line, pair)
        self._owed_steps.pop(pair, None)

    def _op_unqueue(self, proc: Proc, line: TraceLine) -> None:
        """A notice left the gateway's queue (drained, withdrawn, cleared or found stale)."""
        d = line.data
        pair: Pair = (str(d["watcher"]), _target(d["target"]))
        self._note(pair, line)
        queue = self.queues.setdefault(proc, {})
        texts = queue.get(pair, [])
        if d["text"] in texts:
            texts.remove(d["text"])
        if not texts:
            queue.pop(pair, None)
            if not any(p[0] == pair[0] for p in queue):
                self.unwoken.discard((proc, pair[0]))  # nothing left to wake it for

    def _op_notice(self, proc: Proc, line: TraceLine) -> None:
        d = line.data
        pair: Pair = (str(d["watcher"]), _target(d["target"]))
        text, queued, served = str(d["text"]), d["queued"], d.get("served", True)
        self._note(pair, line)
        self._close_event(line)  # notices come after the transaction's last step
        self.summary.notices += 1
        if (pair, text) in self._owed_notices:
            self._owed_notices.remove((pair, text))
        if served is not True:  # R19: another process serves the watcher; nothing queued here
            if queued is not False:
                raise self.fail("T1", "a notice for a watcher this gateway does not serve cannot be queued", line, pair)
            return
        queue = self.queues.setdefault(proc, {})
        held = queue.get(pair, [])
        if queued is True and text in held:
            raise self.fail("INV2", f"gateway {proc} queued {text!r} a second time", line, pair)
        if queued is not True and text not in held:
            raise self.fail("R5", f"the queue reported {text!r} as already held, but it was not queued", line, pair)
        positions = self.pairs.get(pair)
        pending = positions is not None and derive_state(positions) in PENDING_STATES
        current = notice_text(pair[1][0], positions.last_seen) if positions is not None and pending else None
        others = [t for t in held if t != text]
        if current is not None and current in others:
            raise self.fail("INV3", f"the pair stayed pending with notice {current!r}, now {text!r}", line, pair)
        # A gateway that made the pair's last move itself knows its state: what it queues must
        # match (INV4). After another process's move, a stale text is legal; a drain drops it.
        own_move = self.moved_by.get(pair) == proc and pair not in self.resync
        if own_move and others:
            raise self.fail("INV2", f"gateway {proc} holds {others[0]!r} and now {text!r} for one pair", line, pair)
        if own_move and text != current:
            raise self.fail("INV4", f"notice {text!r} queued for a pair that is {derive_state(positions)}"
                                    + (f" at L={positions.last_seen}" if positions is not None else ""), line, pair)
        if queued is True:
            queue.setdefault(pair, []).append(text)
            if ":subagent:" not in pair[0]:  # R12: main-style watchers are woken for it
                self.unwoken.add((proc, pair[0]))

    def _op_reset(self, proc: Proc, line: TraceLine) -> None:
        watcher = str(line.data["session"])
        left = [pair for pair in self.pairs if pair[0] == watcher]
        if left:
            raise self.fail("R14", f"reset of {watcher} left its cursor on {left[0][1][0]}", line, left[0])

    def _op_delete(self, proc: Proc, line: TraceLine) -> None:
        session = _target(line.data["session"])
        left = [pair for pair in self.pairs if pair[1] == session or pair[0] == session[0]]
        if left:
            raise self.fail("R14", f"delete of {session[0]} left the cursor {_name(left[0])}", line, left[0])
        self.heads.pop(session, None)  # INV7 holds while the session exists
        self.pruned.pop(session, None)

    def _op_sweep(self, proc: Proc, line: TraceLine) -> None:
        owed = sorted(pair for pair, positions in self.pairs.items()
                      if derive_state(positions) in PENDING_STATES and pair not in self._swept
                      and pair not in self.resync)
        if owed:
            raise self.fail("R11", f"the startup sweep skipped the pending pair {_name(owed[0])}", line, owed[0])
        if line.data["count"] != len(self._swept):
            raise self.fail("R11", f"the sweep reports {line.data['count']} notices for {len(self._swept)} swept pairs", line)

    def _op_prune(self, proc: Proc, line: TraceLine) -> None:
        d = line.data
        affected: set[Target] = set()
        for key, agent, watermark in d["heads"]:
            session = (str(key), str(agent))
            affected.add(session)
            if watermark < self.pruned.get(session, 0):
                raise self.fail("INV7", f"pruned watermark of {key} fell from {self.pruned[session]} to {watermark}", line)
            head = self.heads.get(session)
            if head is not None and watermark > head:
                raise self.fail("INV7", f"pruned watermark {watermark} of {key} is above its state version {head}", line)
            self.pruned[session] = watermark
        written: dict[Pair, Positions | None] = {}
        for watcher, key, agent, positions in d["cursors"]:
            written[(str(watcher), (str(key), str(agent)))] = _positions(positions)
        for pair, positions in self.pairs.items():
            if pair[1] in affected and derive_state(positions) in PENDING_STATES and pair not in self.resync:
                if written.get(pair) != positions:
                    raise self.fail("R7", f"pruning {pair[1][0]} wrote {_fmt(written.get(pair))} for {_name(pair)},"
                                          f" whose effective positions are {_fmt(positions)}", line, pair)

    def _check_provenance(self, line: TraceLine, pair: Pair, before: Positions | None) -> None:
        """R25: a seed line's provenance is known and never demotes the pair's (traces written
        before provenance carry none: nothing to check)."""
        provenance = line.data.get("provenance")
        if provenance is None:
            return
        if provenance not in PROVENANCES:
            raise self.fail("T1", f"unknown provenance {provenance!r}", line, pair)
        old = self.provenance.get(pair) if before is not None else None
        if old is not None and old != PROVENANCE_AMBIENT and provenance == PROVENANCE_AMBIENT:
            raise self.fail("R25", f"an ambient registration demoted {_name(pair)} from {old}", line, pair)
        if old is not None and old != PROVENANCE_AMBIENT and provenance != old:
            raise self.fail("R25", f"{_name(pair)} changed provenance from {old} to {provenance}", line, pair)
        self.provenance[pair] = provenance

    def _put(self, pair: Pair, positions: Positions | None) -> None:
        if positions is None:
            self.provenance.pop(pair, None)
            self.pairs.pop(pair, None)
            self.watchers_of.get(pair[1], set()).discard(pair[0])
            self.targets_of.get(pair[0], set()).discard(pair[1])
        else:
            self.pairs[pair] = positions
            self.watchers_of.setdefault(pair[1], set()).add(pair[0])
            self.targets_of.setdefault(pair[0], set()).add(pair[1])

    def _note(self, pair: Pair, line: TraceLine) -> None:
        self._pair_lines.setdefault(pair, deque(maxlen=HISTORY)).append(line)


def _name(pair: Pair) -> str:
    return f"{pair[0]} -> {pair[1][0]}"


def _fmt(positions: Positions | None) -> str:
    return "unwatched" if positions is None else f"(L={positions[0]}, N={positions[1]}, M={positions[2]})"
