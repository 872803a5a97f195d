"""The small configuration both sides of the model check share: sessions, pairs, actions.

Three sessions: A watches B and C (one watcher of two targets); B watches C and also acts on
C (the self-acting watcher). A's cursor on C is *ambient* (spec R25, R26): its notices are
queued and drained like the others but must never ask to wake A; A's explicit cursor on B
must, so the check tells the two apart per pair. Events land on B and C; the actors are a human (``None``) and
each session. Actions name sessions only, never sequence numbers, so a trace replays from
the initial state on any side.

The two-process configuration (spec section 6a) shares that database between processes 0
and 1: every action that touches a process's queue ends with the index of the process that
runs it (records, drains, sweeps, attaches, restarts, crashes, resets, deletes, unwatches);
log-only events, watches, prunes and ``tick`` (the wake window passes, for every process)
name no process. A crash is a restart whose process had just taken a watcher's wake slot
for a wake that never reached it (wakemodel.py).
"""

from __future__ import annotations

from typing import Iterable

SESSIONS: tuple[str, ...] = ("A", "B", "C")
PAIRS: tuple[tuple[str, str], ...] = (("A", "B"), ("A", "C"), ("B", "C"))
WATCHERS: tuple[str, ...] = ("A", "B")
TARGETS: tuple[str, ...] = ("B", "C")
ACTORS: tuple[str | None, ...] = (None, "A", "B", "C")
PROCESSES: tuple[int, ...] = (0, 1)
AMBIENT: frozenset[tuple[str, str]] = frozenset({("A", "C")})  # the one queue-only cursor


def provenance_of(pair: tuple[str, str]) -> str:
    """How the configuration registers ``pair`` (its ``watch`` action registers it the same way)."""
    return "ambient" if pair in AMBIENT else "explicit"

Action = tuple  # ("event", target, actor, notifying) | ("drain", w) | ("restart",) | ...


def all_actions(processes: int = 1) -> list[Action]:
    """Every action of the configuration, in a fixed order (BFS order follows it)."""
    if processes == 2:
        return _two_process_actions()
    assert processes == 1, "the check models one or two processes"
    actions: list[Action] = []
    for target in TARGETS:
        for actor in ACTORS:
            actions.append(("event", target, actor, True))
        actions.append(("event", target, None, False))  # log-only
    actions += [("drain", w) for w in WATCHERS]
    actions += [("restart",), ("prune",)]
    actions += [("tick",), ("crash",)]  # the window passes; a crash loses an in-flight wake
    actions += [("reset", w) for w in WATCHERS]
    actions += [("delete", s) for s in SESSIONS]
    actions += [("watch", w, t, provenance_of((w, t))) for w, t in PAIRS]
    actions += [("unwatch", w, t) for w, t in PAIRS]
    return actions


def _two_process_actions() -> list[Action]:
    actions: list[Action] = []
    for target in TARGETS:
        # An actor that does not watch the target acts there as a human does (the check's
        # canonical form says so too): the two-process configuration leaves such actors out.
        actors = [None] + [w for w, t in PAIRS if t == target]
        for process in PROCESSES:
            for actor in actors:
                actions.append(("event", target, actor, True, process))
        actions.append(("event", target, None, False))  # log-only: no queue changes
    actions += [("drain", w, p) for w in WATCHERS for p in PROCESSES]
    actions += [("sweep", p) for p in PROCESSES]
    actions += [("attach", w, p) for w in WATCHERS for p in PROCESSES]
    actions += [("restart", p) for p in PROCESSES] + [("prune",)]
    actions += [("tick",)] + [("crash", p) for p in PROCESSES]
    actions += [("reset", w, p) for w in WATCHERS for p in PROCESSES]
    actions += [("delete", s, p) for s in SESSIONS for p in PROCESSES]
    actions += [("watch", w, t, provenance_of((w, t))) for w, t in PAIRS]
    actions += [("unwatch", w, t, p) for w, t in PAIRS for p in PROCESSES]
    return actions


def process_of(action: Action) -> int | None:
    """The process an action of the two-process configuration runs in (``None``: any)."""
    last = action[-1]
    return last if type(last) is int else None  # not a bool: an event's ``notifying``


def enabled(action: Action, sessions: Iterable[str], retained: int, max_retained: int) -> bool:
    """Whether ``action`` makes sense: named sessions exist, the abstract log has room."""
    live = set(sessions)
    kind = action[0]
    if kind == "event":
        target, actor = action[1], action[2]
        return target in live and (actor is None or actor in live) and retained < max_retained
    if kind in ("drain", "reset", "delete", "attach"):
        return action[1] in live
    if kind in ("watch", "unwatch"):
        return action[1] in live and action[2] in live
    if kind == "prune":
        return retained > 0
    return True  # restart, sweep, tick, crash


def describe(action: Action) -> str:
    """One readable line per action, as printed in a counter-example trace."""
    kind = action[0]
    process = process_of(action)
    where = "" if process is None else f" in process {process}"
    if kind == "event":
        target, actor, notifying = action[1:4]
        what = "material/self event" if notifying else "log-only event"
        return f"{what} on {target} by {actor or 'human'}{where}"
    parts = action[:-1] if process is not None else action
    return " ".join(str(part) for part in parts) + where
