"""The one reference model of session state awareness, written from the spec alone.

It imports nothing from ``sessionstate``: it is the independent side both the stateful tests
(``tests/gateway/test_stateful.py`` and the tools' one) and the exhaustive model check
(``modelcheck.py``, through the ``RefWorld`` view below) compare the implementation with.
It follows the reference gateway's algorithm literally: every material event updates every
watcher's material position *eagerly*, with no transition table and no lazy derivation, so
agreeing with the implementation checks rule R7 too. It also tracks *obligations* (INV6):
each notifying event on T by an actor other than W owes W a notice until W acknowledges it
(L >= sequence) or the pair goes away.

It lives in the package, not under ``tests/``, because ``sessionstate check`` runs the model
check from an installed package; ``tests/test_architecture.py`` holds it to importing nothing
from ``sessionstate``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

# The model check's abstract view (RefWorld): plain tuples.
Event = tuple[int, str, bool, "str | None"]  # (sequence, session, notifying, actor)
Pair = tuple[str, str]
CursorTuple = tuple[int, int, int, int]  # (last_seen, notified, material, seed)
Notice = tuple[str, str, int]  # (watcher, target, changesSince)
Obligation = tuple[str, str, int]  # (watcher, target, sequence)

NOTIFYING = {"human_direct_message", "upstream_missing", "goal_changed"}
KINDS = (
    "human_direct_message",
    "upstream_missing",
    "goal_changed",
    "child_spawned",
    "run_completed",
    "run_failed",
    "compacted",
    "adopted",
    "created",
)
ACTORS = ("human", "agent", "system")
DAY = 86_400.0
WAKE_WINDOW = 20.0
PAGE = 200
PAYLOAD_FIELDS = ("outcome", "channel", "turns", "provider", "burstOverflow")


def notice(target: str, since: int) -> str:
    return (
        f'Session "{target}" changed (other actor). Reconcile before acting: '
        f'session_status sessionKey "{target}" changesSince {since}.'
    )


def agent_of(key: str) -> str | None:
    parts = key.split(":", 2)
    if len(parts) == 3 and parts[0] == "agent" and parts[1] and parts[2]:
        return parts[1]
    return None


def main_style(key: str) -> bool:
    return agent_of(key) is not None and ":subagent:" not in key


def iso(epoch: float) -> str:
    moment = datetime.fromtimestamp(epoch, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@dataclass
class LogEntry:
    seq: int
    session: str
    kind: str
    actor_type: str
    actor_id: str | None
    summary: str
    recorded_at: float
    occurred_at: float
    run_id: str | None = None
    payload: dict[str, Any] | None = None
    dedupe_key: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "sequence": self.seq,
            "kind": self.kind,
            "actorType": self.actor_type,
            "occurredAt": iso(self.occurred_at),
            "summary": self.summary,
        }
        if self.actor_id is not None:
            out["actorId"] = self.actor_id
        if self.run_id is not None:
            out["runId"] = self.run_id
        shown = {k: self.payload[k] for k in PAYLOAD_FIELDS if self.payload and k in self.payload}
        if shown:
            out["payload"] = shown
        return out


@dataclass
class WatchCursor:
    last_seen: int
    notified: int
    material: int
    updated_at: float
    seed: int
    ambient: bool = False  # R25/R26: registered by the gateway itself; its notices never wake

    def positions(self) -> tuple[int, int, int]:
        return (self.last_seen, self.notified, self.material)


@dataclass
class Model:
    retention_days: float = 30
    max_rows: int = 50_000
    record_created: bool = False  # R27's `created` event, as the gateway's record_created option
    now: float = 1_700_000_000.0
    next_seq: int = 1
    sessions: dict[str, float] = field(default_factory=dict)  # key -> created_at
    events: list[LogEntry] = field(default_factory=list)
    heads: dict[str, int] = field(default_factory=dict)
    head_updated: dict[str, float] = field(default_factory=dict)
    pruned: dict[str, int] = field(default_factory=dict)
    cursors: dict[tuple[str, str], WatchCursor] = field(default_factory=dict)
    queues: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)  # text -> (target, since)
    # Obligations (INV6): each notifying event on T by an actor other than W owes W a notice
    # until W acknowledges it (L >= sequence) or the pair goes away.
    owed: set[tuple[str, str, int]] = field(default_factory=set)
    last_wake: dict[str, float] = field(default_factory=dict)
    wakes: list[tuple[str, str]] = field(default_factory=list)
    # Every notice that entered a queue and asks to wake its watcher (R12 before the main-style
    # and window filters; never an ambient pair's, R26): the model check compares them.
    wake_requests: list[tuple[str, str]] = field(default_factory=list)
    # Owed wakes (R12, LIV1): watcher -> (due, reason); each queued line's entry number, and the
    # entry number at this process's own last wake of each watcher (lines above it are new).
    owed_wakes: dict[str, tuple[float, str]] = field(default_factory=dict)
    marks: dict[tuple[str, str], int] = field(default_factory=dict)
    own_mark: dict[str, int] = field(default_factory=dict)
    entered: int = 0
    asking: dict[str, str] = field(default_factory=dict)  # lines queued together ask once
    _group_heals: list[tuple[str, str]] = field(default_factory=list)  # within record(flush_wakes=False)

    # -- sessions --------------------------------------------------------------------------

    def create(self, key: str, parent: str | None = None, run_id: str | None = None, agent: str | None = None,
               kind: str = "main") -> None:
        self.sessions[key] = self.now
        self.heads[key] = 0
        self.head_updated[key] = self.now
        self.pruned[key] = 0
        if self.record_created:  # R27: log-only, before a spawn edge's child_spawned
            created_by = agent or agent_of(key) or "main"
            self._append(key, "created", "system", None, f"session created ({kind})", None, None,
                         f"created:{created_by}:{key}")
        if parent is not None:
            dedupe = f"child-spawned:{run_id}" if run_id else None
            seq = self._append(key, "child_spawned", "agent", parent, f"spawned by {parent}", None, None, dedupe, run_id)
            if seq is not None and agent_of(parent) is not None:
                self.cursors[(parent, key)] = WatchCursor(seq, seq, seq, self.now, seq)

    # -- events ----------------------------------------------------------------------------

    def record(
        self,
        session: str,
        kind: str,
        actor_type: str,
        actor_id: str | None,
        summary: str,
        payload: dict[str, Any] | None = None,
        dedupe_key: str | None = None,
        occurred_at: float | None = None,
        *,
        flush_wakes: bool = True,
    ) -> int:
        """One event. ``flush_wakes=False``: it is one of a group committed together (group
        commit), whose lines ask for one wake per watcher when ``flush_wakes()`` ends it."""
        existing = self._dedupe(dedupe_key)
        if existing is not None:
            return existing
        seq = self._append(session, kind, actor_type, actor_id, summary, payload, occurred_at, dedupe_key)
        assert seq is not None
        if kind in NOTIFYING:
            for (watcher, target), cursor in sorted(self.cursors.items()):
                if target != session or watcher == actor_id:
                    continue
                pending = cursor.notified != cursor.last_seen
                if not pending:
                    cursor.notified = seq
                    cursor.updated_at = self.now
                cursor.material = seq
                self._enqueue(watcher, target, cursor.last_seen)
                self.owed.add((watcher, target, seq))
                if pending and flush_wakes:  # R23: a later material event re-wakes a watcher still pending
                    self._wake(watcher, target, heal=True)
                elif pending:  # in a group the heal follows the group's new lines, as after a commit
                    self._group_heals.append((watcher, target))
            if flush_wakes:
                self._flush_wakes()
        return seq

    def flush_wakes(self) -> None:
        """The end of a group of events committed together (``record(flush_wakes=False)``):
        the lines ask for their wakes, then the heals run (R12, R23)."""
        self._flush_wakes()
        heals, self._group_heals = self._group_heals, []
        for watcher, target in heals:
            self._wake(watcher, target, heal=True)

    def record_run_event(
        self,
        session: str,
        kind: str,
        actor_type: str,
        actor_id: str | None,
        summary: str,
        payload: dict[str, Any] | None,
        dedupe_key: str | None,
        run_id: str,
    ) -> int:
        """A log-only run event carrying its run id (the session tools' run ends)."""
        assert kind not in NOTIFYING
        existing = self._dedupe(dedupe_key)
        if existing is not None:
            return existing
        seq = self._append(session, kind, actor_type, actor_id, summary, payload, None, dedupe_key, run_id)
        assert seq is not None
        return seq

    def _dedupe(self, dedupe_key: str | None) -> int | None:
        if dedupe_key is None:
            return None
        for event in self.events:
            if event.dedupe_key == dedupe_key:
                return event.seq
        return None

    def _append(self, session, kind, actor_type, actor_id, summary, payload, occurred_at, dedupe_key, run_id=None) -> int | None:
        existing = self._dedupe(dedupe_key)
        if existing is not None:
            return existing
        seq = self.next_seq
        self.next_seq += 1
        occurred = self.now if occurred_at is None else min(max(occurred_at, self.now - DAY), self.now)
        self.events.append(
            LogEntry(seq, session, kind, actor_type, actor_id, summary, self.now, occurred,
                  run_id=run_id, payload=payload, dedupe_key=dedupe_key)
        )
        self.heads[session] = seq
        self.head_updated[session] = self.now
        return seq

    # -- queue -----------------------------------------------------------------------------

    def _enqueue(self, watcher: str, target: str, since: int) -> None:
        text = notice(target, since)
        queue = self.queues.setdefault(watcher, {})
        if text in queue:
            return
        queue[text] = (target, since)
        if not self._ambient(watcher, target):  # R26: an ambient pair's line asks nothing
            self.wake_requests.append((watcher, target))
            self._mark(watcher, text)
            if main_style(watcher):
                self.asking.setdefault(watcher, target)

    def _ambient(self, watcher: str, target: str | None) -> bool:
        cursor = self.cursors.get((watcher, target)) if target is not None else None
        return cursor is not None and cursor.ambient

    def _mark(self, watcher: str, text: str) -> None:
        self.entered += 1
        self.marks[(watcher, text)] = self.entered

    def _flush_wakes(self) -> None:
        """The lines queued by one operation ask for one wake per watcher, after all entered."""
        asking, self.asking = self.asking, {}
        for watcher, target in asking.items():
            self._wake(watcher, target)

    def _wake(self, watcher: str, target: str | None, *, heal: bool = False) -> None:
        if self._ambient(watcher, target):
            return  # R26: queue-only
        if main_style(watcher):
            reason = f"session-state: {target}"
            last = self.last_wake.get(watcher)
            if last is None or self.now - last >= WAKE_WINDOW:
                self.last_wake[watcher] = self.now
                self.own_mark[watcher] = self.entered
                self.owed_wakes.pop(watcher, None)
                self.wakes.append((watcher, reason))
            elif not heal:  # R12: owed, due when the window ends
                due = last + WAKE_WINDOW
                held = self.owed_wakes.get(watcher)
                if held is None or due < held[0]:
                    self.owed_wakes[watcher] = (due, reason)

    def holds_new_lines(self, watcher: str) -> bool:
        """Whether the watcher's queue holds a waking line that entered after the own last wake
        (only waking lines are marked: an ambient pair's never counts, R26)."""
        mark = self.own_mark.get(watcher, -1)
        return any(self.marks.get((watcher, text), -1) > mark for text in self.queues.get(watcher, {}))

    def fire_due_wakes(self) -> None:
        """The wake timer at ``now``: each due owed wake fires if new lines are still held."""
        for watcher, (due, reason) in sorted(self.owed_wakes.items(), key=lambda item: (item[1][0], item[0])):
            if due > self.now:
                continue
            del self.owed_wakes[watcher]
            if self.holds_new_lines(watcher):
                target = reason.removeprefix("session-state: ")
                self._wake(watcher, target)

    def _withdraw(self, watcher: str, target: str) -> None:
        queue = self.queues.get(watcher, {})
        for text in [t for t, (tg, _) in queue.items() if tg == target]:
            del queue[text]
        self.owed = {o for o in self.owed if (o[0], o[1]) != (watcher, target)}

    def pending(self, watcher: str) -> list[str]:
        return list(self.queues.get(watcher, {}))

    # -- watching and turns ----------------------------------------------------------------

    def watch(self, watcher: str, target: str, ambient: bool = False) -> bool:
        existing = self.cursors.get((watcher, target))
        if existing is not None:
            existing.ambient = existing.ambient and ambient  # R25: explicit promotes, ambient never demotes
            return False
        v = self.heads[target]
        self.cursors[(watcher, target)] = WatchCursor(v, v, v, self.now, v, ambient)
        return True

    def unwatch(self, watcher: str, target: str) -> bool:
        self._withdraw(watcher, target)
        return self.cursors.pop((watcher, target), None) is not None

    def drain(self, watcher: str) -> list[str]:
        queue = self.queues.pop(watcher, {})
        follow_ups = []
        for text, (target, _) in queue.items():
            cursor = self.cursors[(watcher, target)]
            old_notified = cursor.notified
            cursor.last_seen = old_notified
            self.owed = {o for o in self.owed if not (o[0] == watcher and o[1] == target and o[2] <= old_notified)}
            cursor.notified = max(cursor.material, old_notified)
            cursor.updated_at = self.now
            if cursor.material > old_notified:
                follow_ups.append((target, old_notified))
        for target, since in follow_ups:
            self._enqueue(watcher, target, since)
        self._flush_wakes()
        return list(queue)

    def restart(self, woken: set[str] | None = None) -> None:
        """The startup sweep. With several processes (``woken`` given) only the watchers whose
        notices enter some process's queue again are woken."""
        self.queues = {}  # the wake times are durable (R23): a restart keeps them
        self.owed_wakes, self.own_mark = {}, {}  # the timer and the own wakes die with the process
        for (watcher, target), cursor in sorted(self.cursors.items()):
            if cursor.material > cursor.last_seen and watcher in self.sessions:
                if cursor.notified != cursor.material:
                    cursor.notified = cursor.material
                    cursor.updated_at = self.now
                if woken is None or watcher in woken:
                    self._enqueue(watcher, target, cursor.last_seen)
                else:
                    since = cursor.last_seen
                    self.queues.setdefault(watcher, {})[notice(target, since)] = (target, since)
                    if not self._ambient(watcher, target):
                        self._mark(watcher, notice(target, since))
        self._flush_wakes()

    def requeue(self, watcher: str) -> None:
        """The watcher's notices enter another process's queue (it moved): one wake, R12."""
        queued = sorted(self.queues.get(watcher, {}).items(), key=lambda item: item[1][0])
        waking = [(text, target) for text, (target, _) in queued if not self._ambient(watcher, target)]
        for text, _ in waking:  # R26: an ambient pair's line asks nothing
            self._mark(watcher, text)
        if waking:
            self._wake(watcher, waking[0][1])

    # -- retention, reset, delete ----------------------------------------------------------

    def prune(self) -> dict[str, int]:
        cutoff = self.now - self.retention_days * DAY
        ordered = sorted(self.events, key=lambda e: e.seq)
        beyond = ordered[-(self.max_rows + 1)].seq if len(ordered) > self.max_rows else 0
        doomed = [e for e in ordered if e.recorded_at < cutoff or e.seq <= beyond]
        for event in doomed:
            self.pruned[event.session] = max(self.pruned.get(event.session, 0), event.seq)
        gone = {e.seq for e in doomed}
        self.events = [e for e in self.events if e.seq not in gone]
        expired = [
            pair for pair, c in self.cursors.items()
            if c.updated_at < cutoff and self.head_updated.get(pair[1], 0) < cutoff
        ]
        for watcher, target in expired:
            self.unwatch(watcher, target)
        return {"events": len(doomed), "cursors": len(expired)}

    def reset(self, key: str) -> None:
        for pair in [p for p in self.cursors if p[0] == key]:
            del self.cursors[pair]
        self.owed = {o for o in self.owed if o[0] != key}
        self.queues.pop(key, None)

    def delete(self, key: str) -> None:
        for watcher, target in [p for p in self.cursors if key in p]:
            self.unwatch(watcher, target)
        self.events = [e for e in self.events if e.session != key]
        for table in (self.sessions, self.heads, self.head_updated, self.pruned):
            table.pop(key, None)
        self.queues.pop(key, None)

    def prune_oldest(self) -> Event:
        """Abstract retention for the model check: drop the oldest retained event (R13's
        watermark rule, without time or row counts)."""
        oldest = min(self.events, key=lambda e: e.seq)
        self.events.remove(oldest)
        self.pruned[oldest.session] = max(self.pruned.get(oldest.session, 0), oldest.seq)
        return (oldest.seq, oldest.session, oldest.kind in NOTIFYING, oldest.actor_id)

    def copy(self) -> "Model":
        """An independent copy (log entries are never changed after the append: shared)."""
        return replace(
            self,
            sessions=dict(self.sessions), events=list(self.events), heads=dict(self.heads),
            head_updated=dict(self.head_updated), pruned=dict(self.pruned),
            cursors={pair: replace(c) for pair, c in self.cursors.items()},
            queues={w: dict(q) for w, q in self.queues.items()}, owed=set(self.owed),
            last_wake=dict(self.last_wake), wakes=list(self.wakes), wake_requests=list(self.wake_requests),
            owed_wakes=dict(self.owed_wakes), marks=dict(self.marks), own_mark=dict(self.own_mark),
            entered=self.entered, asking=dict(self.asking),
        )

    # -- reconciliation --------------------------------------------------------------------

    def status(self, key: str, since: int | None) -> dict[str, Any]:
        result: dict[str, Any] = {"sessionKey": key, "stateVersion": self.heads[key]}
        if since is not None:
            mine = sorted((e for e in self.events if e.session == key), key=lambda e: e.seq)
            after = [e for e in mine if e.seq > since]
            result["stateChanges"] = {
                "events": [e.as_json() for e in after[:PAGE]],
                "truncated": len(after) > PAGE,
                "earliestAvailableSequence": mine[0].seq if mine else None,
                "historyGap": since < self.pruned[key],
            }
        return result

    def uncovered(self) -> list[tuple[str, str, int]]:
        """INV6: material events by another actor above L with no notice queued."""
        missing = []
        for (watcher, target), cursor in self.cursors.items():
            queued = any(tg == target for tg, _ in self.queues.get(watcher, {}).values())
            for event in self.events:
                if (event.session == target and event.kind in NOTIFYING and event.actor_id != watcher
                        and event.seq > cursor.last_seen and event.seq > cursor.seed and not queued):
                    missing.append((watcher, target, event.seq))
        return missing


class RefWorld:
    """The model check's view of one ``Model``: abstract sessions (no time, no texts), the
    state as plain tuples the checker hashes and compares, and its actions.

    With several processes (spec section 6a) the durable state is the same whichever process
    acts (R21: a drain in any process acknowledges by the durable cursors), so the view adds
    only the durable claims (R20: watcher -> the process that attached it last; a watcher
    without a claim is served by every process, whose patterns are all ``*``). ``queue`` stays
    the queue of W in a process that serves W and has swept the newest commit (INV11).
    """

    __slots__ = ("model", "claims")

    def __init__(self, model: Model, claims: dict[str, int] | None = None) -> None:
        self.model = model
        self.claims: dict[str, int] = {} if claims is None else claims

    @classmethod
    def initial(cls, sessions: tuple[str, ...], pairs: tuple[Pair, ...], ambient: frozenset[Pair] = frozenset()) -> "RefWorld":
        model = Model()
        for session in sessions:
            model.create(session)
        for pair in pairs:
            model.watch(*pair, ambient=pair in ambient)
        return cls(model)

    def copy(self) -> "RefWorld":
        return RefWorld(self.model.copy(), dict(self.claims))

    def serves(self, process: int, watcher: str) -> bool:
        """R19 with every process's patterns ``*``: the claimant, or anyone when unclaimed."""
        return self.claims.get(watcher, process) == process

    # -- the state, as tuples ---------------------------------------------------------------

    @property
    def sessions(self) -> set[str]:
        return set(self.model.sessions)

    @property
    def events(self) -> list[Event]:
        return [(e.seq, e.session, e.kind in NOTIFYING, e.actor_id) for e in self.model.events]

    @property
    def heads(self) -> dict[str, int]:
        return self.model.heads

    @property
    def pruned(self) -> dict[str, int]:
        return self.model.pruned

    @property
    def cursors(self) -> dict[Pair, CursorTuple]:
        return {pair: (c.last_seen, c.notified, c.material, c.seed) for pair, c in self.model.cursors.items()}

    @property
    def queue(self) -> set[Notice]:
        return {(w, target, since) for w, q in self.model.queues.items() for target, since in q.values()}

    @property
    def owed(self) -> set[Obligation]:
        return self.model.owed

    # -- actions (``process``: which process runs it; the durable outcome does not depend on it)

    def event(self, target: str, actor: str | None, notifying: bool, process: int | None = None) -> int:
        kind = "human_direct_message" if notifying else "compacted"
        return self.model.record(target, kind, "human" if actor is None else "agent", actor, "event")

    def drain(self, watcher: str, process: int | None = None) -> list[Notice]:
        """The lines delivered: one per pending pair of the watcher, for its L (R17, R21)."""
        taken = sorted(n for n in self.queue if n[0] == watcher)
        self.model.drain(watcher)
        return taken

    def restart(self, process: int | None = None) -> None:
        if process is not None:  # closing a gateway drops its claims (R20)
            self.claims = {w: p for w, p in self.claims.items() if p != process}
        self.model.restart()

    def sweep(self, process: int) -> None:
        """R22: the sweep fires no trigger and writes nothing durable."""

    def attach(self, watcher: str, process: int) -> None:
        self.claims[watcher] = process  # R20: the last attach wins

    def prune(self) -> Event:
        return self.model.prune_oldest()

    def reset(self, watcher: str, process: int | None = None) -> None:
        self.model.reset(watcher)

    def delete(self, session: str, process: int | None = None) -> None:
        self.model.delete(session)

    def watch(self, watcher: str, target: str, provenance: str = "explicit") -> bool:
        return self.model.watch(watcher, target, ambient=provenance == "ambient")

    def ambient_pairs(self) -> set[Pair]:
        return {pair for pair, c in self.model.cursors.items() if c.ambient}

    def unwatch(self, watcher: str, target: str, process: int | None = None) -> bool:
        return self.model.unwatch(watcher, target)

    # -- observation -------------------------------------------------------------------------

    def positions(self) -> dict[Pair, tuple[int, int, int]]:
        return {pair: c.positions() for pair, c in self.model.cursors.items()}

    def delta(self, session: str, since: int) -> tuple[list[int], bool]:
        """changesSince: retained sequences above ``since`` and the historyGap flag."""
        seqs = [e.seq for e in self.model.events if e.session == session and e.seq > since]
        return seqs, since < self.model.pruned[session]
