"""The rows that cross the store boundary, as plain named tuples.

Backend-neutral: every backend returns these and nothing else, so the runtime never sees a
driver's row type. Positions are ``(last_seen, notified, material)`` tuples: the store knows
nothing of the protocol's states.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

PositionsTuple = tuple[int, int, int]
# A caught-up cursor as the event hot path reads it: (watcher, positions, provenance, R25).
CaughtUpRow = tuple[str, PositionsTuple, str]
# One event to append: key, agent id, kind, actor type, actor id, run id, summary, payload,
# occurred_at, recorded_at, dedupe key (``SignalLog.append_event``'s arguments, in order).
EventRow = tuple[str, str, str, str, "str | None", "str | None", str, "str | None", float, float, "str | None"]
# Told what a pruning chunk wrote (the protocol trace): (key, agent, pruned watermark) per
# session and (watcher, target key, target agent, positions) per pending cursor of those
# sessions, and how many events it deleted.
PruneObserver = Callable[[list[tuple[str, str, int]], list[tuple[str, str, str, PositionsTuple]], int], None]

# Run statuses: ``running`` until the one terminal compare-and-set.
RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"


class VacuumReport(NamedTuple):
    """What ``Store.vacuum`` did: the database's size before and after, and in one phrase what
    the backend did beyond the rewrite (for the operator)."""

    bytes_before: int
    bytes_after: int
    detail: str


class RecordedAlone(NamedTuple):
    """A lone record the database decided (``Store.record_alone``): its sequence, and per
    notice its decision opened the watcher, the ``changesSince`` and the pair's provenance."""

    sequence: int
    notices: list[tuple[str, int, str]]


class CursorRecord(NamedTuple):
    watcher: str
    target_key: str
    target_agent_id: str
    positions: PositionsTuple  # effective: material already raised per R7
    updated_at: float
    provenance: str = "explicit"  # spawn, explicit or ambient (spec R25)


class EventRecord(NamedTuple):
    sequence: int
    session_key: str
    agent_id: str
    kind: str
    actor_type: str
    actor_id: str | None
    run_id: str | None
    summary: str
    payload: str | None
    occurred_at: float
    recorded_at: float
    dedupe_key: str | None


class SessionRecord(NamedTuple):
    session_key: str
    agent_id: str
    kind: str
    parent_key: str | None
    parent_agent_id: str | None
    label: str | None
    created_at: float
    updated_at: float


class Head(NamedTuple):
    last_sequence: int
    pruned_max_sequence: int


class ChangesPage(NamedTuple):
    """What ``changesSince`` reads of a session (``SignalLog.changes_page``): its head, the
    smallest sequence the log still holds for it (``None``: none), and the page of events
    after the caller's sequence (``contract.EventPageRow``s, ascending)."""

    last_sequence: int
    pruned_max_sequence: int
    earliest_sequence: int | None
    events: list[tuple[Any, ...]]

    def history_gap(self, since: int) -> bool:
        """INV8: whether events after ``since`` were pruned, from the watermark only."""
        return since < self.pruned_max_sequence


class MetaRecord(NamedTuple):
    """A session's runtime metadata; a session without a row reads as ``defaults``."""

    session_key: str
    agent_id: str
    session_id: str | None
    channel: str | None = None
    model: str | None = None
    model_override: str | None = None
    thinking: str | None = None
    runtime: str | None = None
    sandboxed: bool = False
    spawn_depth: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    last_channel: str | None = None
    last_to: str | None = None
    yielded_at: float | None = None
    last_activity_at: float | None = None

    @classmethod
    def defaults(cls, key: str, agent_id: str) -> "MetaRecord":
        return cls(key, agent_id, None)


class RunRecord(NamedTuple):
    run_id: str
    requester_key: str
    requester_agent_id: str
    child_key: str
    child_agent_id: str
    runtime: str
    task: str
    label: str | None
    model: str | None
    thinking: str | None
    thread: bool
    context: str
    timeout_seconds: float | None
    status: str
    outcome: str | None
    result_text: str | None
    announce_channel: str | None
    announce_to: str | None
    steer_count: int
    created_at: float
    ended_at: float | None


class MessageRecord(NamedTuple):
    id: int
    session_key: str
    agent_id: str
    role: str
    text: str
    actor_type: str
    actor_id: str | None
    provenance: dict[str, Any] | None
    tool_calls: list[Any] | None
    tool_result: Any
    input_tokens: int
    output_tokens: int
    created_at: float


class UpstreamLink(NamedTuple):
    generation: int
    session_key: str
    agent_id: str
    provider: str
    host: str
    thread_id: str
    marker: str | None
    primed: bool
    consecutive_misses: int
    version: int
    last_checked_at: float | None
    last_status: str | None
    created_at: float


class PendingCursor(NamedTuple):
    watcher: str
    target_key: str
    target_agent_id: str
    last_seen: int


class SweepSnapshot(NamedTuple):
    log_sequence: int
    change_stamp: int
    frozen: list[PendingCursor]
    changed_watchers: list[str]
    gap: bool  # the change log was trimmed past the previous stamp


class ChangeSet(NamedTuple):
    """What a change feed found committed since its previous ``take`` (R22)."""

    frozen: list[PendingCursor]  # cursors a notifying event turned pending
    watchers: list[str]  # watchers whose cursors or claim changed outside the event hot path
    material: list[tuple[str, str, str | None]]  # (key, agent id, actor id) of notifying events
    resync: bool  # changes may have been missed: bring every watcher in step
