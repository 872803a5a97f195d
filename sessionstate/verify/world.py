"""The small configuration both sides of the model check share: sessions, pairs, actions.

Three sessions: A watches B and C (one watcher of two targets); B watches C and also acts on
C (the self-acting watcher). Events land on B and C; the actors are a human (``None``) and
each session. Actions name sessions only, never sequence numbers, so a trace replays from
the initial state on any side.
"""

from __future__ import annotations

from typing import Iterable

SESSIONS: tuple[str, ...] = ("A", "B", "C")
PAIRS: tuple[tuple[str, str], ...] = (("A", "B"), ("A", "C"), ("B", "C"))
WATCHERS: tuple[str, ...] = ("A", "B")
TARGETS: tuple[str, ...] = ("B", "C")
ACTORS: tuple[str | None, ...] = (None, "A", "B", "C")

Action = tuple  # ("event", target, actor, notifying) | ("drain", w) | ("restart",) | ...


def all_actions() -> list[Action]:
    """Every action of the configuration, in a fixed order (BFS order follows it)."""
    actions: list[Action] = []
    for target in TARGETS:
        for actor in ACTORS:
            actions.append(("event", target, actor, True))
        actions.append(("event", target, None, False))  # log-only
    actions += [("drain", w) for w in WATCHERS]
    actions += [("restart",), ("prune",)]
    actions += [("reset", w) for w in WATCHERS]
    actions += [("delete", s) for s in SESSIONS]
    actions += [("watch", w, t) for w, t in PAIRS]
    actions += [("unwatch", w, t) for w, t in PAIRS]
    return actions


def enabled(action: Action, sessions: Iterable[str], retained: int, max_retained: int) -> bool:
    """Whether ``action`` makes sense: named sessions exist, the abstract log has room."""
    live = set(sessions)
    kind = action[0]
    if kind == "event":
        _, target, actor, _ = action
        return target in live and (actor is None or actor in live) and retained < max_retained
    if kind in ("drain", "reset", "delete"):
        return action[1] in live
    if kind in ("watch", "unwatch"):
        return action[1] in live and action[2] in live
    if kind == "prune":
        return retained > 0
    return True  # restart


def describe(action: Action) -> str:
    """One readable line per action, as printed in a counter-example trace."""
    kind = action[0]
    if kind == "event":
        _, target, actor, notifying = action
        what = "material/self event" if notifying else "log-only event"
        return f"{what} on {target} by {actor or 'human'}"
    return " ".join(str(part) for part in action)
