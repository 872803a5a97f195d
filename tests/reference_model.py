"""A reference model of session state awareness, written from the spec alone.

It imports nothing from ``sessionstate``: it is the trusted side the stateful tests compare
the real gateway with. It follows the reference gateway's algorithm literally (every material
event updates every watcher's material position eagerly), so it also checks that the
implementation's lazy material watermark (spec R7) is observationally the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

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
class Event:
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
class Cursor:
    last_seen: int
    notified: int
    material: int
    updated_at: float
    seed: int

    def positions(self) -> tuple[int, int, int]:
        return (self.last_seen, self.notified, self.material)


@dataclass
class Model:
    retention_days: float = 30
    max_rows: int = 50_000
    now: float = 1_700_000_000.0
    next_seq: int = 1
    sessions: dict[str, float] = field(default_factory=dict)  # key -> created_at
    events: list[Event] = field(default_factory=list)
    heads: dict[str, int] = field(default_factory=dict)
    head_updated: dict[str, float] = field(default_factory=dict)
    pruned: dict[str, int] = field(default_factory=dict)
    cursors: dict[tuple[str, str], Cursor] = field(default_factory=dict)
    queues: dict[str, dict[str, str | None]] = field(default_factory=dict)  # text -> target
    last_wake: dict[str, float] = field(default_factory=dict)
    wakes: list[tuple[str, str]] = field(default_factory=list)

    # -- sessions --------------------------------------------------------------------------

    def create(self, key: str, parent: str | None = None, run_id: str | None = None) -> None:
        self.sessions[key] = self.now
        self.heads[key] = 0
        self.head_updated[key] = self.now
        self.pruned[key] = 0
        if parent is not None:
            dedupe = f"child-spawned:{run_id}" if run_id else None
            seq = self._append(key, "child_spawned", "agent", parent, f"spawned by {parent}", None, None, dedupe, run_id)
            if seq is not None and agent_of(parent) is not None:
                self.cursors[(parent, key)] = Cursor(seq, seq, seq, self.now, seq)

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
    ) -> int:
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
                if pending:  # R23: a later material event re-wakes a watcher still pending
                    self._wake(watcher, target)
        return seq

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
            Event(seq, session, kind, actor_type, actor_id, summary, self.now, occurred,
                  run_id=run_id, payload=payload, dedupe_key=dedupe_key)
        )
        self.heads[session] = seq
        self.head_updated[session] = self.now
        return seq

    # -- queue -----------------------------------------------------------------------------

    def _enqueue(self, watcher: str, target: str | None, since: int | None, text: str | None = None) -> None:
        text = text if text is not None else notice(target, since)  # type: ignore[arg-type]
        queue = self.queues.setdefault(watcher, {})
        if text in queue:
            return
        queue[text] = target
        self._wake(watcher, target)

    def _wake(self, watcher: str, target: str | None) -> None:
        if main_style(watcher):
            last = self.last_wake.get(watcher)
            if last is None or self.now - last >= WAKE_WINDOW:
                self.last_wake[watcher] = self.now
                self.wakes.append((watcher, f"session-state: {target}"))

    def _withdraw(self, watcher: str, target: str) -> None:
        queue = self.queues.get(watcher, {})
        for text in [t for t, tg in queue.items() if tg == target]:
            del queue[text]

    def pending(self, watcher: str) -> list[str]:
        return list(self.queues.get(watcher, {}))

    # -- watching and turns ----------------------------------------------------------------

    def watch(self, watcher: str, target: str) -> bool:
        if (watcher, target) in self.cursors:
            return False
        v = self.heads[target]
        self.cursors[(watcher, target)] = Cursor(v, v, v, self.now, v)
        return True

    def unwatch(self, watcher: str, target: str) -> bool:
        self._withdraw(watcher, target)
        return self.cursors.pop((watcher, target), None) is not None

    def drain(self, watcher: str) -> list[str]:
        queue = self.queues.pop(watcher, {})
        follow_ups = []
        for text, target in queue.items():
            if target is None:
                continue
            cursor = self.cursors[(watcher, target)]
            old_notified = cursor.notified
            cursor.last_seen = old_notified
            cursor.notified = max(cursor.material, old_notified)
            cursor.updated_at = self.now
            if cursor.material > old_notified:
                follow_ups.append((target, old_notified))
        for target, since in follow_ups:
            self._enqueue(watcher, target, since)
        return list(queue)

    def restart(self, woken: set[str] | None = None) -> None:
        """The startup sweep. With several processes (``woken`` given) only the watchers whose
        notices enter some process's queue again are woken."""
        self.queues = {}  # the wake times are durable (R23): a restart keeps them
        for (watcher, target), cursor in sorted(self.cursors.items()):
            if cursor.material > cursor.last_seen and watcher in self.sessions:
                if cursor.notified != cursor.material:
                    cursor.notified = cursor.material
                    cursor.updated_at = self.now
                if woken is None or watcher in woken:
                    self._enqueue(watcher, target, cursor.last_seen)
                else:
                    self.queues.setdefault(watcher, {})[notice(target, cursor.last_seen)] = target

    def requeue(self, watcher: str) -> None:
        """The watcher's notices enter another process's queue (it moved): a wake each, R12."""
        for text, target in sorted(self.queues.get(watcher, {}).items(), key=lambda item: str(item[1])):
            if target is not None:
                self._wake(watcher, target)

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
        self.queues.pop(key, None)

    def delete(self, key: str) -> None:
        for watcher, target in [p for p in self.cursors if key in p]:
            self.unwatch(watcher, target)
        self.events = [e for e in self.events if e.session != key]
        for table in (self.sessions, self.heads, self.head_updated, self.pruned):
            table.pop(key, None)
        self.queues.pop(key, None)

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
            queued = any(tg == target for tg in self.queues.get(watcher, {}).values())
            for event in self.events:
                if (event.session == target and event.kind in NOTIFYING and event.actor_id != watcher
                        and event.seq > cursor.last_seen and event.seq > cursor.seed and not queued):
                    missing.append((watcher, target, event.seq))
        return missing
