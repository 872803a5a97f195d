"""The sessions and pairs of the nemesis, shared by its controller, its workers and its judge.

*Stable* pairs are watched once, before the load, and nothing unwatches, resets or deletes
them: every notifying event of another actor on their target must reach their watcher by a
delivered notice (the judge's coverage check). *Churn* pairs are watched and unwatched, their
sessions reset, deleted and created again, by every worker at random.
"""

from __future__ import annotations

STABLE_SESSIONS = tuple(f"agent:n{i}:main" for i in range(4))
CHURN_SESSIONS = tuple(f"agent:c{i}:main" for i in range(3))
SESSIONS = STABLE_SESSIONS + CHURN_SESSIONS
WATCHERS = SESSIONS  # every session is a main-style watcher of something
S, C = STABLE_SESSIONS, CHURN_SESSIONS
STABLE_PAIRS = ((S[0], S[1]), (S[1], S[2]), (S[2], S[3]), (S[3], S[0]), (S[0], S[2]))
CHURN_PAIRS = ((C[0], C[1]), (C[1], S[1]), (S[2], C[2]), (C[2], C[0]), (C[0], S[3]))
NOTIFYING = ("human_direct_message", "goal_changed", "upstream_missing")
LOG_ONLY = ("run_completed", "compacted")


def worker_names(workers: int) -> list[str]:
    return [f"g{i}" for i in range(workers)]


def own_watchers(name: str, workers: int) -> list[str]:
    """The watchers a worker attaches when it starts (R20): watcher i belongs to worker i mod n."""
    index = worker_names(workers).index(name)
    return [w for i, w in enumerate(WATCHERS) if i % workers == index]
