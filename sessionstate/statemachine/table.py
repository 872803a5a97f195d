"""The notice protocol as data: states, triggers, transitions, effects, event kinds.

This module is the single source the ``transitions.Machine`` is built from, and it mirrors
the tables of ``spec/notice-protocol.md`` row for row (a test parses the spec and compares).
Nothing here runs: it only declares.
"""

from __future__ import annotations

from typing import Final, NamedTuple

UNWATCHED: Final = "unwatched"
CAUGHT_UP: Final = "caught_up"
NOTICE_PENDING: Final = "notice_pending"
PENDING_WITH_MORE: Final = "pending_with_more"

STATES: Final = (UNWATCHED, CAUGHT_UP, NOTICE_PENDING, PENDING_WITH_MORE)
WATCHED_STATES: Final = (CAUGHT_UP, NOTICE_PENDING, PENDING_WITH_MORE)
PENDING_STATES: Final = (NOTICE_PENDING, PENDING_WITH_MORE)

SEED: Final = "seed"
MATERIAL_EVENT: Final = "material_event"
SELF_EVENT: Final = "self_event"
LOG_ONLY_EVENT: Final = "log_only_event"
DRAIN: Final = "drain"
RESTART_SWEEP: Final = "restart_sweep"
EXPIRE: Final = "expire"
RESET_WATCHER: Final = "reset_watcher"
DELETE_SESSION: Final = "delete_session"
UNWATCH: Final = "unwatch"

TRIGGERS: Final = (
    SEED,
    MATERIAL_EVENT,
    SELF_EVENT,
    LOG_ONLY_EVENT,
    DRAIN,
    RESTART_SWEEP,
    EXPIRE,
    RESET_WATCHER,
    DELETE_SESSION,
    UNWATCH,
)

# Effects: names of pure functions in ``effects.py``.
EFFECT_SEED: Final = "seed"
EFFECT_KEEP: Final = "keep"
EFFECT_FREEZE: Final = "freeze"
EFFECT_RAISE_MATERIAL: Final = "raise_material"
EFFECT_ACK: Final = "ack"
EFFECT_SWEEP: Final = "sweep"
EFFECT_REMOVE: Final = "remove"

EFFECTS: Final = (
    EFFECT_SEED,
    EFFECT_KEEP,
    EFFECT_FREEZE,
    EFFECT_RAISE_MATERIAL,
    EFFECT_ACK,
    EFFECT_SWEEP,
    EFFECT_REMOVE,
)


class Transition(NamedTuple):
    source: str
    trigger: str
    dest: str
    effect: str


def _removals(source: str) -> list[Transition]:
    # Every way a watched pair ends goes to `unwatched` and withdraws the notice.
    return [
        Transition(source, trigger, UNWATCHED, EFFECT_REMOVE)
        for trigger in (EXPIRE, RESET_WATCHER, DELETE_SESSION, UNWATCH)
    ]


# Legal transitions only; every (state, trigger) absent here is illegal.
TRANSITIONS: Final[tuple[Transition, ...]] = (
    Transition(UNWATCHED, SEED, CAUGHT_UP, EFFECT_SEED),
    Transition(UNWATCHED, UNWATCH, UNWATCHED, EFFECT_KEEP),
    Transition(CAUGHT_UP, SEED, CAUGHT_UP, EFFECT_KEEP),
    Transition(CAUGHT_UP, MATERIAL_EVENT, NOTICE_PENDING, EFFECT_FREEZE),
    Transition(CAUGHT_UP, SELF_EVENT, CAUGHT_UP, EFFECT_KEEP),
    Transition(CAUGHT_UP, LOG_ONLY_EVENT, CAUGHT_UP, EFFECT_KEEP),
    Transition(CAUGHT_UP, RESTART_SWEEP, CAUGHT_UP, EFFECT_KEEP),
    *_removals(CAUGHT_UP),
    Transition(NOTICE_PENDING, SEED, NOTICE_PENDING, EFFECT_KEEP),
    Transition(NOTICE_PENDING, MATERIAL_EVENT, PENDING_WITH_MORE, EFFECT_RAISE_MATERIAL),
    Transition(NOTICE_PENDING, SELF_EVENT, NOTICE_PENDING, EFFECT_KEEP),
    Transition(NOTICE_PENDING, LOG_ONLY_EVENT, NOTICE_PENDING, EFFECT_KEEP),
    Transition(NOTICE_PENDING, DRAIN, CAUGHT_UP, EFFECT_ACK),
    Transition(NOTICE_PENDING, RESTART_SWEEP, NOTICE_PENDING, EFFECT_SWEEP),
    *_removals(NOTICE_PENDING),
    Transition(PENDING_WITH_MORE, SEED, PENDING_WITH_MORE, EFFECT_KEEP),
    Transition(PENDING_WITH_MORE, MATERIAL_EVENT, PENDING_WITH_MORE, EFFECT_RAISE_MATERIAL),
    Transition(PENDING_WITH_MORE, SELF_EVENT, PENDING_WITH_MORE, EFFECT_KEEP),
    Transition(PENDING_WITH_MORE, LOG_ONLY_EVENT, PENDING_WITH_MORE, EFFECT_KEEP),
    Transition(PENDING_WITH_MORE, DRAIN, NOTICE_PENDING, EFFECT_ACK),
    Transition(PENDING_WITH_MORE, RESTART_SWEEP, NOTICE_PENDING, EFFECT_SWEEP),
    *_removals(PENDING_WITH_MORE),
)


class KindPolicy(NamedTuple):
    kind: str
    notifies: bool  # R1: a material change, a notice for every other actor's watchers
    seeds_parent: bool = False  # R4: recorded on a new child, it seeds the spawning parent's cursor


# The event-kind table of the spec (section 8). The hot path reads NOTIFYING_KINDS, the spawn
# path SEEDING_KINDS, and verify/promela.py renders both into the SPIN model's event classes.
EVENT_KINDS: Final[tuple[KindPolicy, ...]] = (
    KindPolicy("human_direct_message", True),
    KindPolicy("upstream_missing", True),
    KindPolicy("goal_changed", True),
    KindPolicy("child_spawned", False, seeds_parent=True),
    KindPolicy("run_completed", False),
    KindPolicy("run_failed", False),
    KindPolicy("compacted", False),
    KindPolicy("adopted", False),
    KindPolicy("created", False),
)

SPAWN_KIND: Final = "child_spawned"  # what a spawn records on the child (R4)
NOTIFYING_KINDS: Final = frozenset(p.kind for p in EVENT_KINDS if p.notifies)
SEEDING_KINDS: Final = frozenset(p.kind for p in EVENT_KINDS if p.seeds_parent)
KNOWN_KINDS: Final = frozenset(p.kind for p in EVENT_KINDS)

ACTOR_TYPES: Final = ("human", "agent", "system")
RUN_FAILED_OUTCOMES: Final = ("error", "timeout", "cancelled")
