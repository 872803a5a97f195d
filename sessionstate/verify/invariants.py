"""The spec's invariants, stated on the abstract worlds of the model check.

``state_violations`` checks one state (both sides must agree on everything observable;
with two processes, INV11 for every process that has swept the newest commit);
``edge_violations`` checks what one action changed (INV3, INV5, INV7's monotonicity,
INV8's watermark, and that no obligation is dropped while still uncovered);
``delivery_violations`` checks what one drain delivered (INV10).
"""

from __future__ import annotations

from ..errors import ProtocolError
from ..statemachine import derive_state
from .machinepath import MachWorld, SharedMachWorld
from .refmodel import Event, Notice, RefWorld
from .world import Action, describe, process_of


def observable(world: RefWorld | MachWorld, *, with_queue: bool = True) -> tuple:
    durable = (sorted(world.sessions), world.events, sorted(world.heads.items()),
               sorted(world.pruned.items()), sorted(world.positions().items()))
    return durable + (sorted(world.queue),) if with_queue else durable


def state_violations(ref: RefWorld, mach: MachWorld, fresh: tuple[bool, ...] = ()) -> list[str]:
    out: list[str] = []
    if isinstance(mach, SharedMachWorld):
        # The durable state and the claims; each process's queue is held to INV11 instead.
        ours = observable(ref, with_queue=False) + (sorted(ref.claims.items()),)
        theirs = observable(mach, with_queue=False) + (sorted(mach.claims.items()),)
        out += served_queue_violations(ref, mach, fresh)
    else:
        ours, theirs = observable(ref), observable(mach)
    if ours != theirs:
        out.append(f"AGREE: reference {ours} != machine path {theirs}")
    positions = ref.positions()
    for pair, (last, notified, material) in positions.items():
        if not (last <= notified <= material and (last < notified or notified == material)):
            out.append(f"INV1: {pair} positions {(last, notified, material)}")
    for pair, eff in mach.positions().items():
        try:
            derive_state(eff)
        except ProtocolError as exc:
            out.append(f"INV1: machine path {pair}: {exc}")
    per_pair: dict[tuple[str, str], list[int]] = {}
    for watcher, target, since in ref.queue:
        per_pair.setdefault((watcher, target), []).append(since)
    for pair, sinces in per_pair.items():
        if len(sinces) > 1:
            out.append(f"INV2: {pair} has {len(sinces)} notices queued")
        if pair not in positions:
            out.append(f"INV4: notice queued for {pair}, which has no cursor")
    for pair, (last, notified, _material) in positions.items():
        queued = per_pair.get(pair, [])
        if (last < notified) != bool(queued):
            out.append(f"INV4: {pair} pending={last < notified} but queued={queued}")
        if any(since != last for since in queued):
            out.append(f"INV4: {pair} notice says changesSince {queued}, L is {last}")
    out += _coverage_violations(ref, per_pair)
    for session in ref.sessions:
        mine = [e[0] for e in ref.events if e[1] == session]
        if any(seq > ref.heads[session] for seq in mine) or ref.pruned[session] > ref.heads[session]:
            out.append(f"INV7: head of {session} ({ref.heads[session]}) below a retained or pruned sequence")
        if any(seq <= ref.pruned[session] for seq in mine):
            out.append(f"INV8: {session} retains an event at or below its pruned watermark")
    return out


def served_queue_violations(ref: RefWorld, mach: SharedMachWorld, fresh: tuple[bool, ...]) -> list[str]:
    """INV11 (with INV2-INV4 in each process): a process that has swept the newest commit
    holds, for each watcher it serves, exactly the reference's queue (one notice per pending
    pair, for its L), and nothing for a watcher it does not serve."""
    out: list[str] = []
    owed_all = ref.queue
    for process, queue in enumerate(mach.queues):
        if not fresh[process]:
            continue  # between another process's commit and this one's sweep (section 11)
        pairs = [(w, t) for w, t, _ in queue]
        for pair in sorted(set(pairs)):
            if pairs.count(pair) > 1:
                out.append(f"INV2: process {process} (swept) holds {pairs.count(pair)} notices for {pair}")
        for watcher in sorted(ref.sessions | {n[0] for n in queue}):
            held = sorted(n for n in queue if n[0] == watcher)
            serves = ref.serves(process, watcher)
            owed = sorted(n for n in owed_all if n[0] == watcher) if serves else []
            if held != owed:
                role = "serves" if serves else "does not serve"
                out.append(f"INV11: process {process} has swept the newest commit and {role} {watcher}:"
                           f" it queues {held}, the durable cursors owe {owed}")
    return out


def opened_violations(action: Action, before: SharedMachWorld, after: SharedMachWorld) -> list[str]:
    """INV5 in every process, in step or not: a notice enters a process's queue only from a
    notifying event by another actor recorded there, a drain's follow-up there, or that
    process's sweep, attach or restart (which queue what the cursors owe)."""
    out: list[str] = []
    kind, acting = action[0], process_of(action)
    for process, queue in enumerate(after.queues):
        for watcher, target, since in sorted(queue - before.queues[process]):
            if process == acting:
                if kind in ("sweep", "restart", "crash") or (kind in ("attach", "drain") and action[1] == watcher):
                    continue
                if kind == "event" and action[1] == target and action[3] and action[2] != watcher:
                    continue
            out.append(f"INV5: {describe(action)} opened a notice for ({watcher}, {target}) in process {process}")
    return out


def delivery_violations(action: Action, before: RefWorld, delivered: dict[str, list[Notice]]) -> list[str]:
    """INV10 for one drain: exactly one line per pending pair of the watcher, for its L (so
    each pending episode is delivered by the drain that ends it, and by no other)."""
    watcher = action[1]
    episodes = sorted((w, t, c[0]) for (w, t), c in before.cursors.items() if w == watcher and c[0] < c[1])
    out: list[str] = []
    for side, lines in delivered.items():
        got = sorted(lines)
        targets = [t for _, t, _ in got]
        if len(targets) != len(set(targets)):
            out.append(f"INV10: {describe(action)}: the {side} delivered two lines for one target: {got}")
        elif got != episodes:
            out.append(f"INV10: {describe(action)}: the {side} delivered {got}, the pending episodes were {episodes}")
    return out


def _coverage_violations(ref: RefWorld, per_pair: dict[tuple[str, str], list[int]]) -> list[str]:
    out: list[str] = []
    for watcher, target, seq in ref.owed:
        cursor = ref.cursors.get((watcher, target))
        if cursor is None or seq <= cursor[0]:
            out.append(f"OBLIGATION: ({watcher}, {target}, {seq}) kept after it was discharged")
            continue
        if seq > cursor[2] or (watcher, target) not in per_pair:
            out.append(f"INV6: event {seq} on {target} owed to {watcher} is not covered by a queued notice")
        shown, gap = ref.delta(target, cursor[0])
        if seq not in shown and not gap:  # INV8/INV9: reconciling must show it or flag the gap
            out.append(f"INV9: changesSince {cursor[0]} on {target} hides owed event {seq} without historyGap")
    for (watcher, target), (last, _n, _m, seed) in ref.cursors.items():
        for seq, session, notifying, actor in ref.events:
            if (session == target and notifying and actor != watcher and seq > max(last, seed)
                    and (watcher, target, seq) not in ref.owed):
                out.append(f"INV6: event {seq} on {target} by {actor} is not tracked as owed to {watcher}")
    return out


def edge_violations(action: Action, before: RefWorld, after: RefWorld, pruned: Event | None) -> list[str]:
    out: list[str] = []
    kind = action[0]
    for pair, old in before.cursors.items():
        new = after.cursors.get(pair)
        if new is None or old[0] >= old[1] or new[0] >= new[1]:
            continue
        if kind == "drain" and action[1] == pair[0]:
            continue  # the notice was consumed; a follow-up is a new notice
        old_n = sorted(n for n in before.queue if n[:2] == pair)
        new_n = sorted(n for n in after.queue if n[:2] == pair)
        if old_n != new_n:
            out.append(f"INV3: pending {pair} notice changed {old_n} -> {new_n}")
    opened = after.queue - before.queue
    for watcher, target, since in opened:
        if kind == "event":
            ev_target, actor, notifying = action[1:4]
            if not notifying or watcher == actor or target != ev_target:
                out.append(f"INV5: {kind} opened a notice for ({watcher}, {target})")
        elif kind not in ("restart", "crash") and not (kind == "drain" and action[1] == watcher):
            out.append(f"INV5: {' '.join(map(str, action))} opened a notice for ({watcher}, {target})")
    for session in before.sessions & after.sessions:
        if after.heads[session] < before.heads[session]:
            out.append(f"INV7: head of {session} fell {before.heads[session]} -> {after.heads[session]}")
    if pruned is not None and pruned[1] in after.pruned and after.pruned[pruned[1]] < pruned[0]:
        out.append(f"INV8: pruned event {pruned[0]} above the watermark {after.pruned[pruned[1]]}")
    for watcher, target, seq in before.owed - after.owed:
        cursor = after.cursors.get((watcher, target))
        if cursor is not None and cursor[0] < seq:
            out.append(f"LIVENESS: owed event {seq} on {target} dropped for {watcher} while uncovered")
    return out
