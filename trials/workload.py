"""A seeded random workload on one gateway, shared by the crash and concurrency workers."""

from __future__ import annotations

import random
from typing import Callable

from sessionstate.errors import SessionExists
from sessionstate.facade.gateway import Gateway

SESSIONS = tuple(f"agent:w{i}:main" for i in range(4))
PAIRS = ((SESSIONS[0], SESSIONS[1]), (SESSIONS[0], SESSIONS[2]), (SESSIONS[1], SESSIONS[2]), (SESSIONS[3], SESSIONS[1]))
NOTIFYING = ("human_direct_message", "goal_changed", "upstream_missing")
LOG_ONLY = ("run_completed", "compacted")


def ensure_sessions(gw: Gateway) -> None:
    for key in SESSIONS:
        try:
            gw.create_session(key)
        except SessionExists:
            pass  # another process (or a previous life of this one) created it


def owned_pairs(index: int, processes: int) -> tuple[tuple[str, str], ...]:
    """Spec section 11: notices are delivered by one process, so each process watches and
    drains only the watchers it owns (appends go anywhere)."""
    return tuple(p for p in PAIRS if SESSIONS.index(p[0]) % processes == index)


def one_step(
    gw: Gateway,
    rng: random.Random,
    acknowledge: Callable[[int, str], None],
    *,
    prune: bool,
    pairs: tuple[tuple[str, str], ...] = PAIRS,
) -> None:
    """One random operation; ``acknowledge(seq, session)`` runs after each committed append."""
    roll = rng.random()
    if roll < 0.8:
        target = rng.choice(SESSIONS)
        notifying = rng.random() < 0.7
        actor = rng.choice((None,) + SESSIONS)
        seq = gw.record_event(
            target, rng.choice(NOTIFYING if notifying else LOG_ONLY),
            actor_type="human" if actor is None else "agent", actor_id=actor, summary="workload event",
        )
        if seq is not None:
            acknowledge(seq, target)
    elif roll < 0.9:
        gw.drain_system_events(rng.choice(pairs)[0])
    elif roll < 0.97 or not prune:
        watcher, target = rng.choice(pairs)
        (gw.watch if rng.random() < 0.7 else gw.unwatch)(watcher, target)
    else:
        gw.prune()
