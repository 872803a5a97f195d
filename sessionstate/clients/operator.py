"""What an operator sees of a live database: each watcher's pairs with the state derived from
their positions, how far behind each is, how close its oldest unread event is to being pruned
(the *lead*), the notice it is owed and its last wake; and what the next ``prune`` would remove.

Read only, through the store's API (no SQL here), under the gateway's lock. Used by the operator
commands (cli_operator.py: a command that only looks opens its gateway through ``observe``;
``watchers`` and ``prune`` read their views here), by ``sessionstate mcp`` for its ``--session`` argument and
by the metrics (metrics.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..errors import UnknownSession
from ..shared.keys import DEFAULT_AGENT_ID, check_key, is_agent_qualified
from ..shared.timefmt import DAY_SECONDS
from ..shared.formats import notice_text
from ..statemachine.table import CAUGHT_UP
from ..statemachine.positions import derive_state

if TYPE_CHECKING:
    from ..facade.gateway import Gateway
    from ..store.records import CursorRecord

# Counting a pair's unread events stops here: an operator needs "very far behind", not the digit.
BEHIND_CAP = 10_000


def camel_keys(data: dict[str, Any]) -> dict[str, Any]:
    """``last_seen`` -> ``lastSeen``: the JSON spelling of every other sessionstate output."""
    return {k.split("_")[0] + "".join(w.title() for w in k.split("_")[1:]): v for k, v in data.items()}


@dataclass(frozen=True)
class PairView:
    """One (watcher, target) cursor as an operator reads it."""

    watcher: str
    target_key: str
    target_agent_id: str
    state: str
    last_seen: int
    notified: int
    material: int
    head: int  # the target's newest sequence (its stateVersion)
    behind: int  # the target's retained events after last_seen (at most BEHIND_CAP)
    behind_capped: bool
    oldest_unread: int | None  # the first of them; None when there is none
    history_gap: bool  # events after last_seen were pruned already: the delta is gone
    # Before the oldest unread event is pruned: events that can still be recorded (row cap)
    # and seconds left (retention window). Conservative: never later than the real prune.
    lead_events: int | None
    lead_seconds: float | None
    owed_notice: str | None  # the notice text the cursor owes (R18); None when caught up

    def as_json(self) -> dict[str, Any]:
        return camel_keys(asdict(self))


def observe(url: str | None, *, retention_days: float = 30, max_rows: int = 50_000) -> "Gateway":
    """A gateway on an existing database for looking only: unlike ``Gateway.open`` it runs no
    startup sweep, whose ``sweep`` effect writes (N := M, R11) and would change the very
    positions an operator came to read. It serves nothing and creates nothing."""
    from ..shared.config import normalize_url
    from ..facade.gateway import Gateway
    from ..statemachine import NOTIFYING_KINDS
    from ..store import open_store

    store = open_store(normalize_url(url), notifying_kinds=NOTIFYING_KINDS, create=False)
    try:
        return Gateway(store, retention_days=retention_days, max_rows=max_rows, serve=[])
    except BaseException:
        store.close()
        raise


def resolve_session_argument(gw: "Gateway", key: str, field: str = "session key") -> str:
    """A session key from the command line read as the tools read one from the default agent
    (tools/context.py): an agent-qualified key names itself; a bare key (``main``) is that key
    under agent ``main``, else the alias ``agent:main:<key>``, else the one agent's session of
    that key."""
    check_key(key, field)
    if is_agent_qualified(key) or gw.ops.session_exists(key, DEFAULT_AGENT_ID):
        return key
    alias = f"agent:{DEFAULT_AGENT_ID}:{key}"
    if gw.ops.session_exists(alias):
        return alias
    try:
        return gw.ops.resolve(key)[0]
    except UnknownSession:
        raise UnknownSession(f"unknown session {key!r} (nor {alias!r})") from None


def watcher_pairs(gw: "Gateway", watcher: str) -> list[PairView]:
    """Every pair ``watcher`` holds a cursor for, in target order."""
    with gw.locked() as store:
        return [_pair(gw, record) for record in store.cursors_held_by(watcher)]


def all_pairs(gw: "Gateway") -> list[PairView]:
    """Every pair in the database, in (watcher, target) order."""
    with gw.locked() as store:
        return [_pair(gw, record) for record in store.all_cursors()]


def last_wakes(gw: "Gateway") -> dict[str, float]:
    """Each watcher's last wake (shared by every process, R23)."""
    with gw.locked() as store:
        return store.serving.wake_slots()


def _pair(gw: "Gateway", record: "CursorRecord") -> PairView:
    store = gw.store
    last_seen, notified, material = record.positions
    head = store.head(record.target_key, record.target_agent_id)
    unread = store.events_after(record.target_key, record.target_agent_id, last_seen, BEHIND_CAP + 1)
    state = derive_state(record.positions)
    oldest = unread[0] if unread else None
    lead_events = lead_seconds = None
    if oldest is not None:
        # The row cap keeps the newest max_rows events: the oldest unread one goes once
        # max_rows events are newer than it. high_water - sequence counts deleted sequences
        # too, so this is never more than the real lead.
        lead_events = max(0, gw.ops.max_rows - (store.sequence_high_water() - oldest.sequence))
        lead_seconds = max(0.0, oldest.recorded_at + gw.ops.retention_days * DAY_SECONDS - gw.clock())
    return PairView(
        watcher=record.watcher,
        target_key=record.target_key,
        target_agent_id=record.target_agent_id,
        state=state,
        last_seen=last_seen,
        notified=notified,
        material=material,
        head=head.last_sequence if head else 0,
        behind=min(len(unread), BEHIND_CAP),
        behind_capped=len(unread) > BEHIND_CAP,
        oldest_unread=oldest.sequence if oldest else None,
        history_gap=bool(head and head.pruned_max_sequence > last_seen),
        lead_events=lead_events,
        lead_seconds=lead_seconds,
        owed_notice=None if state == CAUGHT_UP else notice_text(record.target_key, last_seen),
    )


@dataclass(frozen=True)
class PrunePlan:
    """What ``Gateway.prune()`` would remove now (R13), and whose unread history it would cut."""

    cutoff: float
    max_rows: int
    events_total: int
    events_over_row_cap: int
    events_past_retention: int
    events_to_remove: int
    cursors_to_expire: list[tuple[str, str, str]]  # (watcher, target key, target agent id)
    gaps_opened: list[tuple[str, str, str]]  # pairs whose unread events would go: historyGap

    def as_json(self) -> dict[str, Any]:
        return camel_keys(asdict(self))


def prune_plan(gw: "Gateway") -> PrunePlan:
    """The dry run of ``prune()``: reads every retained event's sequence and time once."""
    cutoff = gw.clock() - gw.ops.retention_days * DAY_SECONDS
    with gw.locked() as store:
        events: list[tuple[int, float, tuple[str, str]]] = []
        for session in store.list_sessions():
            target = (session.session_key, session.agent_id)
            after = 0
            while page := store.events_after(*target, after, 1000):
                events += [(e.sequence, e.recorded_at, target) for e in page]
                after = page[-1].sequence
        events.sort()
        over = max(0, len(events) - gw.ops.max_rows)
        going = [e for i, e in enumerate(events) if i < over or e[1] < cutoff]
        last_going: dict[tuple[str, str], int] = {}
        for sequence, _, target in going:
            last_going[target] = max(last_going.get(target, 0), sequence)
        expiring = [(c.watcher, c.target_key, c.target_agent_id) for c in store.expired_cursors(cutoff)]
        gaps = [
            (c.watcher, c.target_key, c.target_agent_id)
            for c in store.all_cursors()
            if last_going.get((c.target_key, c.target_agent_id), 0) > c.positions[0]
            and (c.watcher, c.target_key, c.target_agent_id) not in expiring
        ]
        return PrunePlan(
            cutoff=cutoff,
            max_rows=gw.ops.max_rows,
            events_total=len(events),
            events_over_row_cap=over,
            events_past_retention=sum(1 for e in events if e[1] < cutoff),
            events_to_remove=len(going),
            cursors_to_expire=expiring,
            gaps_opened=gaps,
        )
