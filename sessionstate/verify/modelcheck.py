"""Exhaustive bounded model check: BFS over (reference model, machine path) in lockstep.

Every reachable state up to ``depth`` actions is visited once (states are deduplicated
up to an order-preserving renaming of sequence numbers: the protocol only compares and
takes maxima of sequences, so renamed states behave alike). In every state both sides must
agree on everything observable and every invariant must hold; from every state the path that
drains all watchers must discharge every obligation within ``drain_rounds`` rounds. BFS makes
the first counter-example found a shortest one; it prints as a trace of actions.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Unpack

from .invariants import edge_violations, state_violations
from .machinepath import MachOptions, MachWorld, PathViolation
from .refmodel import Event, RefWorld
from .world import PAIRS, SESSIONS, WATCHERS, Action, all_actions, describe, enabled

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
    states: int = 0
    transitions: int = 0
    depth_reached: int = 0
    exhausted: bool = False  # no new state at the last level: the whole space was seen
    liveness_checked: int = 0
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


def initial_node(**options: Unpack[MachOptions]) -> Node:
    return Node(RefWorld.initial(SESSIONS, PAIRS), MachWorld.initial(SESSIONS, PAIRS, **options))


def apply(world: RefWorld | MachWorld, action: Action) -> Event | None:
    """Run one action on either side; returns the pruned event for ``prune``."""
    kind = action[0]
    if kind == "event":
        world.event(action[1], action[2], action[3])
    elif kind == "prune":
        return world.prune()
    elif kind == "restart":
        world.restart()
    else:
        getattr(world, kind)(*action[1:])
    return None


def step(node: Node, action: Action, *, check_state: bool = True) -> tuple[Node, list[str]]:
    """One action on both sides, with the edge checks (and the state checks unless told not)."""
    ref, mach = node.ref.copy(), node.mach.copy()
    pruned = apply(ref, action)
    try:
        apply(mach, action)
    except (PathViolation, AssertionError) as exc:
        return Node(ref, mach), [f"MACHINE: {exc}"]
    except Exception as exc:  # ProtocolError: an illegal trigger in a reachable state
        return Node(ref, mach), [f"MACHINE: {type(exc).__name__}: {exc}"]
    messages = edge_violations(action, node.ref, ref, pruned)
    if check_state:
        messages += state_violations(ref, mach)
    return Node(ref, mach), messages


def liveness_violations(node: Node, rounds: int) -> list[str]:
    """Drain every live watcher, ``rounds`` times at most: all obligations must be acked."""
    current = node
    for _ in range(rounds):
        if not current.ref.owed:
            return []
        for watcher in WATCHERS:
            if watcher in current.ref.sessions:
                current, messages = step(current, ("drain", watcher))
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
    rank = {v: i for i, v in enumerate(sorted(values))}
    return (
        tuple(sorted(ref.sessions)),
        # An actor that can never watch the target acts like a human there (R2 needs W only).
        tuple((rank[s], t, n, a if a in _POSSIBLE_WATCHERS[t] else None) for s, t, n, a in ref.events),
        tuple((k, rank[v], rank[ref.pruned[k]]) for k, v in sorted(ref.heads.items())),
        tuple((p, tuple(rank[x] for x in c)) for p, c in sorted(ref.cursors.items())),
        tuple((p, tuple(rank[x] for x in c)) for p, c in sorted(mach.cursors.items())),
        tuple(sorted((w, t, rank[s]) for w, t, s in ref.queue)),
        tuple(sorted((w, t, rank[s]) for w, t, s in ref.owed)),
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
    max_retained: int = 3,
    drain_rounds: int = 3,
    check_bound: bool = False,
    write_back_on_prune: bool = True,
    progress: Callable[[int, int, int], object] | None = None,
) -> tuple[ModelCheckReport, dict[Key, tuple[Key | None, Action | None]]]:
    """BFS to ``depth``; returns the report and the parent map (for traces and replay)."""
    started = time.monotonic()
    report = ModelCheckReport(depth=depth, max_retained=max_retained)
    actions = all_actions()
    root = initial_node(check_bound=check_bound, write_back_on_prune=write_back_on_prune)
    root_key = digest(root)
    parents: dict[Key, tuple[Key | None, Action | None]] = {root_key: (None, None)}
    frontier: list[tuple[Key, Node]] = [(root_key, root)]
    messages = state_violations(root.ref, root.mach) + liveness_violations(root, drain_rounds)
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
                child, messages = step(node, action, check_state=False)
                child_key = digest(child)
                if child_key in parents and not messages:
                    continue
                if child_key not in parents:
                    parents[child_key] = (key, action)
                    messages = messages or state_violations(child.ref, child.mach)
                    messages = messages or liveness_violations(child, drain_rounds)
                    report.liveness_checked += 1
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
