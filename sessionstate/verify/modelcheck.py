"""Exhaustive bounded model check: BFS over (reference model, machine path) in lockstep.

Every reachable state up to ``depth`` actions is visited once (states are deduplicated
up to an order-preserving renaming of sequence numbers: the protocol only compares and
takes maxima of sequences, so renamed states behave alike). In every state both sides must
agree on everything observable and every invariant must hold; from every state the path that
drains all watchers must discharge every obligation within ``drain_rounds`` rounds. BFS makes
the first counter-example found a shortest one; it prints as a trace of actions.

With ``processes=2`` the same database is shared by two processes (spec section 6a): each
has its own queue and view of the claims (``SharedMachWorld``), and the node records which
processes have swept the newest commit, where INV11 is checked; INV10 is checked on every
drain, in both configurations.

Wakes and time (``wakemodel.py``): every node carries the wake layer over the processes'
queues (open windows, owed wakes, notices newer than each process's last wake); the actions
``tick`` (the window passes) and ``crash`` (a process loses an in-flight wake and restarts)
move it, and LIV1 is checked in every state, a violation printing as a shortest trace.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Unpack, cast

from .invariants import delivery_violations, edge_violations, opened_violations, state_violations
from .machinepath import MachOptions, MachWorld, PathViolation, SharedMachWorld
from .refmodel import Event, Notice, RefWorld
from . import wakemodel
from .wakemodel import WakeState
from .world import AMBIENT, PAIRS, SESSIONS, WATCHERS, Action, all_actions, describe, enabled, process_of

Key = bytes
_POSSIBLE_WATCHERS = {t: {w for w, tt in PAIRS if tt == t} for t in SESSIONS}


@dataclass
class Violation:
    messages: list[str]
    trace: list[Action]

    def render(self) -> str:
        lines = [f"counter-example ({len(self.trace)} steps from the initial state):"]
        lines += [f"  {i + 1:>2}. {describe(a)}" for i, a in enumerate(self.trace)]
        lines += [f"  violated: {m}" for m in self.messages]
        return "\n".join(lines)


@dataclass
class ModelCheckReport:
    depth: int
    max_retained: int
    processes: int = 1
    states: int = 0
    transitions: int = 0
    depth_reached: int = 0
    exhausted: bool = False  # no new state at the last level: the whole space was seen
    liveness_checked: int = 0
    owing_states: int = 0  # states reached in which some process owes a watcher a wake (LIV1 has work)
    # R26 witnessed, not vacuous: drains that delivered an ambient pair's notice, and wake
    # requests checked (none may name an ambient pair).
    ambient_delivered: int = 0
    wake_requests: int = 0
    seconds: float = 0.0
    violation: Violation | None = None
    levels: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.violation is None


@dataclass
class Node:
    ref: RefWorld
    mach: MachWorld
    # Two processes: per process, whether it has swept the newest commit (INV11 applies).
    fresh: tuple[bool, ...] = ()
    wakes: WakeState = WakeState()


def initial_node(processes: int = 1, **options: Unpack[MachOptions]) -> Node:
    ref = RefWorld.initial(SESSIONS, PAIRS, AMBIENT)
    if processes == 1:
        return Node(ref, MachWorld.initial(SESSIONS, PAIRS, AMBIENT, **options), wakes=WakeState.initial(1))
    return Node(ref, SharedMachWorld.shared(SESSIONS, PAIRS, processes, AMBIENT, **options), (True,) * processes,
                WakeState.initial(processes))


def apply(world: RefWorld | MachWorld, action: Action) -> Event | list[Notice] | None:
    """Run one action on either side; returns the pruned event for ``prune`` and the
    delivered notices for ``drain``."""
    kind = action[0]
    if kind == "tick":  # time passes: nothing durable or queued changes (the wake layer moves)
        return None
    if kind == "crash":  # for the protocol a crash is a restart (the wake layer loses a wake)
        kind = "restart"
    if kind in ("prune", "drain"):
        return getattr(world, kind)(*action[1:])
    getattr(world, kind)(*action[1:])
    return None


def queues_of(mach: MachWorld) -> list[set[Notice]]:
    """Each process's queue (one process: the machine path's queue)."""
    if isinstance(mach, SharedMachWorld):
        return mach.queues
    return [mach.queue]


def _relevant(ref: RefWorld) -> tuple:
    """What another process's queue depends on: the claims and, by INV4, the reference's
    queue (each pending pair with its L). A commit that changes neither leaves nothing for
    a sweep to do."""
    return sorted(ref.claims.items()), ref.queue


def freshness(node: Node, action: Action, ref: RefWorld) -> tuple[bool, ...]:
    """Which processes have swept the newest commit after ``action``: the acting process's
    own commits keep it in step; its sweep or restart brings it in step."""
    if not node.fresh:
        return ()
    acting = process_of(action)
    if action[0] in ("sweep", "restart", "crash"):
        swept = tuple(p == acting or f for p, f in enumerate(node.fresh))
    else:
        swept = node.fresh
    if _relevant(node.ref) == _relevant(ref):
        return swept
    return tuple(f and p == acting for p, f in enumerate(swept))


def step(node: Node, action: Action, *, check_state: bool = True, owed_wakes: bool = True) -> tuple[Node, list[str]]:
    """One action on both sides, with the edge checks (and the state checks unless told not)."""
    ref, mach = node.ref.copy(), node.mach.copy()
    ref.model.wake_requests = []  # what this action asks; copies start with none
    ambient_before = ref.ambient_pairs()
    ref_result = apply(ref, action)
    fresh = freshness(node, action, ref)
    try:
        mach_result = apply(mach, action)
    except (PathViolation, AssertionError) as exc:
        return Node(ref, mach, fresh, node.wakes), [f"MACHINE: {exc}"]
    except Exception as exc:  # ProtocolError: an illegal trigger in a reachable state
        return Node(ref, mach, fresh, node.wakes), [f"MACHINE: {type(exc).__name__}: {exc}"]
    wakes = wakemodel.advance(node.wakes, action, queues_of(node.mach), queues_of(mach), owed_wakes=owed_wakes)
    pruned = cast(Event, ref_result) if action[0] == "prune" else None
    messages = edge_violations(action, node.ref, ref, pruned)
    if action[0] == "drain":
        delivered = {"reference": ref_result, "machine path": mach_result}
        messages += delivery_violations(action, node.ref, cast(dict[str, list[Notice]], delivered))
    if isinstance(mach, SharedMachWorld):
        messages += opened_violations(action, cast(SharedMachWorld, node.mach), mach)
    messages += wake_violations(ref, mach, ambient_before | ref.ambient_pairs())
    if check_state:
        messages += state_violations(ref, mach, fresh) + wakemodel.liv1_violations(wakes)
    return Node(ref, mach, fresh, wakes), messages


def wake_violations(ref: RefWorld, mach: MachWorld, ambient: set[tuple[str, str]]) -> list[str]:
    """R26 on one action: no notice of an ambient pair asked to wake its watcher, on either
    side; with one process, both sides asked for the same wakes (so explicit pairs do ask)."""
    out = [f"R26: {side} asked to wake {pair[0]} for the ambient pair {pair}"
           for side, asked in (("reference", ref.model.wake_requests), ("machine path", mach.woken))
           for pair in asked if pair in ambient]
    if not isinstance(mach, SharedMachWorld) and sorted(ref.model.wake_requests) != sorted(mach.woken):
        out.append(f"R12: reference asked wakes {sorted(ref.model.wake_requests)}, machine path {sorted(mach.woken)}")
    return out


def liveness_violations(node: Node, rounds: int) -> list[str]:
    """Drain every live watcher, ``rounds`` times at most: all obligations must be acked.
    With several processes round ``r`` drains in process ``r`` modulo their number."""
    current = node
    processes = len(node.fresh)
    for round_ in range(rounds):
        if not current.ref.owed:
            return []
        for watcher in WATCHERS:
            if watcher in current.ref.sessions:
                action = ("drain", watcher) if not processes else ("drain", watcher, round_ % processes)
                current, messages = step(current, action)
                if messages:
                    return [f"while draining: {m}" for m in messages]
    if current.ref.owed:
        return [f"LIVENESS: still owed after {rounds} drain rounds: {sorted(current.ref.owed)}"]
    return []


def digest(node: Node) -> Key:
    """16 bytes standing for the canonical state (memory: millions of states are kept)."""
    return hashlib.blake2b(repr(canonical(node)).encode(), digest_size=16).digest()


def canonical(node: Node) -> tuple:
    """The state up to an order-preserving renaming of sequence numbers."""
    ref, mach = node.ref, node.mach
    values = {0}
    values.update(e[0] for e in ref.events)
    values.update(ref.heads.values())
    values.update(ref.pruned.values())
    for c in ref.cursors.values():
        values.update(c)
    for stored in mach.cursors.values():
        values.update(stored)
    values.update(n[2] for n in ref.queue)
    values.update(o[2] for o in ref.owed)
    if isinstance(mach, SharedMachWorld):
        for queue in mach.queues:
            values.update(n[2] for n in queue)
    for notices in node.wakes.new:
        values.update(n[2] for n in notices)
    rank = {v: i for i, v in enumerate(sorted(values))}
    one = (
        tuple(sorted(ref.sessions)),
        # An actor that can never watch the target acts like a human there (R2 needs W only).
        tuple((rank[s], t, n, a if a in _POSSIBLE_WATCHERS[t] else None) for s, t, n, a in ref.events),
        tuple((k, rank[v], rank[ref.pruned[k]]) for k, v in sorted(ref.heads.items())),
        tuple((p, tuple(rank[x] for x in c)) for p, c in sorted(ref.cursors.items())),
        tuple((p, tuple(rank[x] for x in c)) for p, c in sorted(mach.cursors.items())),
        tuple(sorted((w, t, rank[s]) for w, t, s in ref.queue)),
        tuple(sorted((w, t, rank[s]) for w, t, s in ref.owed)),
    )
    if not isinstance(mach, SharedMachWorld):
        return one + wakemodel.canonical(node.wakes, rank, (0,))
    # The processes are interchangeable (the initial state and the actions are symmetric in
    # them): a state and its mirror image are one state.
    return one + min(
        _processes_part(ref, mach, node.fresh, rank, order) + wakemodel.canonical(node.wakes, rank, order)
        for order in _ORDERS[len(mach.queues)]
    )


_ORDERS = {2: ((0, 1), (1, 0))}


def _processes_part(ref: RefWorld, mach: SharedMachWorld, fresh: tuple[bool, ...], rank: dict[int, int],
                    order: tuple[int, ...]) -> tuple:
    """The per-process state with process ``order[i]`` renamed to ``i``."""
    name = {old: new for new, old in enumerate(order)}
    return (
        tuple(sorted((w, name[p]) for w, p in ref.claims.items())),
        tuple(tuple(sorted((w, name[p]) for w, p in mach.views[old].items())) for old in order),
        tuple(tuple(sorted((w, t, rank[s]) for w, t, s in mach.queues[old])) for old in order),
        tuple(fresh[old] for old in order),
    )


def trace_to(parents: dict[Key, tuple[Key | None, Action | None]], key: Key) -> list[Action]:
    trace: list[Action] = []
    while True:
        parent, action = parents[key]
        if parent is None:
            return trace[::-1]
        trace.append(action)  # type: ignore[arg-type]
        key = parent


def run_modelcheck(
    depth: int = 10,
    *,
    processes: int = 1,
    max_retained: int = 3,
    drain_rounds: int = 3,
    check_bound: bool = False,
    write_back_on_prune: bool = True,
    ambient_wakes: bool = False,
    owed_wakes: bool = True,
    progress: Callable[[int, int, int], object] | None = None,
) -> tuple[ModelCheckReport, dict[Key, tuple[Key | None, Action | None]]]:
    """BFS to ``depth``; returns the report and the parent map (for traces and replay).
    ``owed_wakes=False`` models the wake as it was before R12's owed wakes (dropped inside
    the window): LIV1 then fails."""
    started = time.monotonic()
    report = ModelCheckReport(depth=depth, max_retained=max_retained, processes=processes)
    actions = all_actions(processes)
    root = initial_node(processes, check_bound=check_bound, write_back_on_prune=write_back_on_prune,
                        ambient_wakes=ambient_wakes)
    root_key = digest(root)
    parents: dict[Key, tuple[Key | None, Action | None]] = {root_key: (None, None)}
    frontier: list[tuple[Key, Node]] = [(root_key, root)]
    messages = state_violations(root.ref, root.mach, root.fresh) + liveness_violations(root, drain_rounds)
    if messages:
        report.violation = Violation(messages, [])
    level = 0
    while frontier and report.ok and level < depth:
        level += 1
        next_frontier: list[tuple[Key, Node]] = []
        for key, node in frontier:
            for action in actions:
                if not enabled(action, node.ref.sessions, len(node.ref.events), max_retained):
                    continue
                report.transitions += 1
                # State checks depend only on the canonical state: run them once per state.
                child, messages = step(node, action, check_state=False, owed_wakes=owed_wakes)
                report.wake_requests += len(child.mach.woken)
                if action[0] == "drain" and any((n[0], n[1]) in AMBIENT for n in node.ref.queue if n[0] == action[1]):
                    report.ambient_delivered += 1
                child_key = digest(child)
                if child_key in parents and not messages:
                    continue
                if child_key not in parents:
                    parents[child_key] = (key, action)
                    messages = messages or state_violations(child.ref, child.mach, child.fresh)
                    messages = messages or wakemodel.liv1_violations(child.wakes)
                    messages = messages or liveness_violations(child, drain_rounds)
                    report.liveness_checked += 1
                    report.owing_states += any(child.wakes.owed)
                if messages:
                    report.violation = Violation(messages, trace_to(parents, key) + [action])
                    break
                next_frontier.append((child_key, child))
            if not report.ok:
                break
        if next_frontier:
            report.depth_reached = level
        report.levels.append(len(next_frontier))
        frontier = next_frontier
        if progress is not None:
            progress(level, len(parents), report.transitions)
    report.exhausted = report.ok and not frontier
    report.states = len(parents)
    report.seconds = time.monotonic() - started
    return report, parents


def sample_traces(parents: dict[Key, tuple[Key | None, Action | None]], count: int, seed: int) -> Iterator[list[Action]]:
    """``count`` traces to distinct explored states, deepest-biased, reproducible by ``seed``."""
    import random

    keys = list(parents)
    rng = random.Random(seed)
    rng.shuffle(keys)
    ranked = sorted(keys[: count * 4], key=lambda k: -len(trace_to(parents, k)))
    for key in ranked[:count]:
        yield trace_to(parents, key)
