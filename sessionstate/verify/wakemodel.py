"""The model check's wakes and time (R12, R23, LIV1, WAKE1): a layer over each process's queue.

Time is abstract: a watcher's durable window is *open* (it was woken within the window) or
not, and the action ``tick`` is "the window passes": every window closes and each process's
timer fires its due owed wakes, in process order (the first to take the slot wins it; the
others stay owed, R23). ``crash`` is a process that took a watcher's slot for a wake and died
before the hook reached the watcher (the in-flight wake is lost), then restarts.

Per process the layer keeps which queued notices entered after its own last wake of their
watcher (``new``) and which watchers it owes a wake (``owed``). A material event on a pair whose
line the event's process still holds wakes the watcher again once its window passed (R23's
re-wake, as the SPIN model's ``event`` and the gateway do). Only main-style watchers wake:
in the shared configuration A is main-style, B a sub-agent; A's ambient cursor on C never
wakes (R26), so its notices never count as new.

LIV1, checked in every state: a process holding a new notice of a main-style watcher owes it a
wake and the watcher's window is open, so the wake fires when the window passes. With
``owed=False`` (the behaviour before owed wakes: a suppressed wake is dropped) it fails, and
the explorer prints the shortest trace.
"""

from __future__ import annotations

from dataclasses import dataclass

from .refmodel import Notice
from .world import AMBIENT

MAIN_STYLE: frozenset[str] = frozenset({"A"})


def waking(notice: Notice) -> bool:
    """Whether a queued notice asks to wake its watcher: a main-style watcher's, not an ambient
    pair's (R12, R26)."""
    return notice[0] in MAIN_STYLE and (notice[0], notice[1]) not in AMBIENT


@dataclass(frozen=True)
class WakeState:
    open_windows: frozenset[str] = frozenset()
    owed: tuple[frozenset[str], ...] = (frozenset(),)
    new: tuple[frozenset[Notice], ...] = (frozenset(),)
    wakes: int = 0  # how many wakes reached a watcher on the path (not part of the state)

    @classmethod
    def initial(cls, processes: int) -> "WakeState":
        return cls(frozenset(), (frozenset(),) * processes, (frozenset(),) * processes)


@dataclass
class _Draft:
    """The layer while an action changes it."""

    open: set[str]
    owed: list[set[str]]
    new: list[set[Notice]]
    wakes: int

    def wake_or_owe(self, process: int, watcher: str, *, owed_wakes: bool, lost: bool = False) -> None:
        if watcher not in self.open:  # the slot is free: take it and wake (WAKE1)
            self.open.add(watcher)
            self.new[process] = {n for n in self.new[process] if n[0] != watcher}
            self.owed[process].discard(watcher)
            if not lost:
                self.wakes += 1
        elif owed_wakes:  # inside the window: owed, due when it ends (R12)
            self.owed[process].add(watcher)


def advance(
    before: WakeState,
    action: tuple,
    queues_before: list[set[Notice]],
    queues_after: list[set[Notice]],
    *,
    owed_wakes: bool = True,
) -> WakeState:
    """The wake layer after ``action``, given each process's queue before and after it."""
    kind = action[0]
    draft = _Draft(set(before.open_windows), [set(o) for o in before.owed], [set(n) for n in before.new],
                   before.wakes)
    restarted: int | None = None
    if kind in ("restart", "crash"):
        restarted = action[1] if len(action) > 1 else 0
    if kind == "crash" and restarted is not None:  # its in-flight wake took the slot, then it died
        for watcher in sorted({n[0] for n in queues_before[restarted] if waking(n)}):
            draft.wake_or_owe(restarted, watcher, owed_wakes=owed_wakes, lost=True)
    if restarted is not None:  # its timer and its own wakes died with it
        draft.owed[restarted] = set()
        draft.new[restarted] = set()
    attached = (action[1], action[2]) if kind == "attach" else None  # (watcher, process)
    for process, after in enumerate(queues_after):
        entered = set(after) if process == restarted else after - queues_before[process]
        if attached is not None and attached[1] == process:  # R23: its lines enter afresh
            entered |= {n for n in after if n[0] == attached[0]}
        draft.new[process] = {n for n in draft.new[process] if n in after}
        draft.new[process] |= {n for n in entered if waking(n)}
        for watcher in sorted({n[0] for n in entered if waking(n)}):  # one wake per group (R12)
            draft.wake_or_owe(process, watcher, owed_wakes=owed_wakes)
    if kind == "event" and action[3]:  # R23: a material event re-wakes a watcher still holding its line
        _, target, actor, _, *rest = action
        process = rest[0] if rest else 0
        held = queues_before[process] & queues_after[process]
        for watcher in sorted({n[0] for n in held if n[1] == target and n[0] != actor and waking(n)}):
            if watcher not in draft.open:  # once its window passed; inside it, nothing (SPIN's event)
                draft.wake_or_owe(process, watcher, owed_wakes=owed_wakes)
    if kind == "tick":  # the window passes: windows close, the timers fire what is due
        draft.open = set()
        for process in range(len(queues_after)):
            for watcher in sorted(draft.owed[process]):
                draft.owed[process].discard(watcher)
                if any(n[0] == watcher for n in draft.new[process]):
                    draft.wake_or_owe(process, watcher, owed_wakes=owed_wakes)
    return WakeState(
        frozenset(draft.open),
        tuple(frozenset(o) for o in draft.owed),
        tuple(frozenset(n) for n in draft.new),
        draft.wakes,
    )


def liv1_violations(state: WakeState) -> list[str]:
    """LIV1 in this state (see the module's docstring)."""
    out = []
    for process, new in enumerate(state.new):
        for watcher in sorted({n[0] for n in new}):
            if watcher not in state.owed[process] or watcher not in state.open_windows:
                why = "no wake is owed" if watcher not in state.owed[process] else "its window is closed"
                out.append(
                    f"LIV1: process {process} holds a notice for {watcher} that entered after its"
                    f" last wake of it, and {why}: the notice is stranded"
                )
    return out


def canonical(state: WakeState, rank: dict[int, int], order: tuple[int, ...]) -> tuple:
    """The layer with sequences renamed by ``rank`` and process ``order[i]`` named ``i``."""
    return (
        tuple(sorted(state.open_windows)),
        tuple(tuple(sorted(state.owed[p])) for p in order),
        tuple(tuple(sorted((w, t, rank[s]) for w, t, s in state.new[p])) for p in order),
    )
