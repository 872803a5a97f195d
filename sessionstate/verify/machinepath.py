"""The ``transitions`` machine path, abstracted: ``fire`` over the compiled ``DISPATCH``.

It does what ``Gateway`` does, on plain data: only caught-up cursors are written on a
material event; a pending cursor's ``material`` is a stored lower bound and the effective value
is derived from the event log (R7); pruning writes the effective value back before deleting
(R13). For pending cursors it also fires the trigger the gateway skips and checks that the
lazily derived positions equal what ``raise_material``/``keep`` would have written.

Optionally (``check_bound``) every fire is repeated on a ``PairModel`` bound to the one
``transitions.Machine`` and must agree with the dispatch table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict, Unpack, cast

from ..statemachine import PairModel, Positions, fire
from ..statemachine.machine import Step
from ..statemachine.table import (
    DELETE_SESSION,
    DRAIN,
    LOG_ONLY_EVENT,
    MATERIAL_EVENT,
    RESET_WATCHER,
    RESTART_SWEEP,
    SEED,
    SELF_EVENT,
    UNWATCH,
)
from ..shared.provenance import PROVENANCE_EXPLICIT, is_queue_only, registered_provenance
from .refmodel import Event, Notice, Pair

Stored = tuple[int, int, int]  # (last_seen, notified, stored material)


class MachOptions(TypedDict, total=False):
    """The switches ``MachWorld.initial`` passes through to the world."""

    check_bound: bool
    write_back_on_prune: bool
    ambient_wakes: bool


class PathViolation(AssertionError):
    """The machine path contradicted itself (lazy rule, bound machine, illegal trigger)."""


@dataclass(slots=True)
class MachWorld:
    sessions: set[str]
    events: list[Event] = field(default_factory=list)
    heads: dict[str, int] = field(default_factory=dict)
    pruned: dict[str, int] = field(default_factory=dict)
    cursors: dict[Pair, Stored] = field(default_factory=dict)
    queue: set[Notice] = field(default_factory=set)
    next_seq: int = 1
    check_bound: bool = False
    write_back_on_prune: bool = True  # a switch so tests can prove the checker catches R7 bugs
    ambient_wakes: bool = False  # a switch so tests can prove the checker catches R26 bugs
    provenance: dict[Pair, str] = field(default_factory=dict)  # durable, beside each cursor (R25)
    # The pairs whose notice entered a queue during the last action and asked to wake the
    # watcher (the gateway's one wake decision, R12/R26); the checker resets it per action.
    woken: list[Pair] = field(default_factory=list)

    @classmethod
    def initial(cls, sessions: tuple[str, ...], pairs: tuple[Pair, ...], ambient: frozenset[Pair] = frozenset(),
                **options: Unpack[MachOptions]) -> "MachWorld":
        world = cls(set(sessions), heads={s: 0 for s in sessions}, pruned={s: 0 for s in sessions}, **options)
        for pair in pairs:
            world.watch(*pair, "ambient" if pair in ambient else PROVENANCE_EXPLICIT)
        world.woken = []
        return world

    def copy(self) -> "MachWorld":
        return MachWorld(set(self.sessions), list(self.events), dict(self.heads), dict(self.pruned),
                         dict(self.cursors), set(self.queue), self.next_seq, self.check_bound,
                         self.write_back_on_prune, self.ambient_wakes, dict(self.provenance), [])

    def _ask_wake(self, pair: Pair) -> None:
        """A notice for ``pair`` entered a queue: the wake decision (R26: never for ambient)."""
        if self.ambient_wakes or not is_queue_only(self.provenance.get(pair)):
            self.woken.append(pair)

    def _queue(self, notice: Notice) -> None:
        if notice not in self.queue:
            self.queue.add(notice)
            self._ask_wake((notice[0], notice[1]))

    # -- R7 ------------------------------------------------------------------------------

    def effective(self, pair: Pair) -> Positions | None:
        stored = self.cursors.get(pair)
        if stored is None:
            return None
        last, notified, material = stored
        if notified > last:
            watcher, target = pair
            for seq, session, notifying, actor in self.events:
                if session == target and notifying and seq > notified and actor != watcher:
                    material = max(material, seq)
        return Positions(last, notified, material)

    def _effective_stored(self, pair: Pair) -> Stored:
        """``effective`` as a plain stored tuple, for a pair that has a cursor."""
        positions = self.effective(pair)
        assert positions is not None, f"{pair} has no cursor"
        return cast(Stored, tuple(positions))  # a Positions is three ints

    def _fire(self, pair: Pair, positions: Positions | None, trigger: str, seq: int | None = None) -> Step:
        step = fire(pair, positions, trigger, seq)
        if self.check_bound:
            model = PairModel(pair, positions)
            try:
                model.fire(trigger, seq)
            finally:
                model.detach()
            bound = (model.state, model.positions, model.notices[-1] if model.notices else None)
            if bound != (step.next_state, step.positions, step.notice_since):
                raise PathViolation(f"bound machine {bound} != dispatch {step} for {pair} {trigger}")
        return step

    def _write(self, pair: Pair, positions: Positions | None) -> None:
        if positions is None:
            self.cursors.pop(pair, None)
            self.provenance.pop(pair, None)
            self.queue = {n for n in self.queue if (n[0], n[1]) != pair}
        else:
            self.cursors[pair] = tuple(positions)  # type: ignore[assignment]

    # -- actions (mirroring Gateway) -----------------------------------------------------

    def event(self, target: str, actor: str | None, notifying: bool) -> int:
        pairs = sorted(p for p in self.cursors if p[1] == target)
        before = {p: self.effective(p) for p in pairs}
        seq = self.next_seq
        self.next_seq += 1
        self.events.append((seq, target, notifying, actor))
        self.heads[target] = seq
        for pair in pairs:
            old = before[pair]
            assert old is not None
            if not notifying:
                trigger = LOG_ONLY_EVENT
            else:
                trigger = SELF_EVENT if pair[0] == actor else MATERIAL_EVENT
            step = self._fire(pair, old, trigger, seq)
            if notifying and old.notified == old.last_seen:  # caught up: the gateway writes it
                self._write(pair, step.positions)
                if step.notice_since is not None:
                    self._queue((pair[0], target, step.notice_since))
            elif step.positions != self.effective(pair) or step.notice_since is not None:
                # Nothing is written for pending (or log-only) cursors: the log must imply it.
                raise PathViolation(
                    f"{pair}: {trigger} gives {step.positions} but the log implies {self.effective(pair)}")
        return seq

    def drain(self, watcher: str) -> list[Notice]:
        taken = sorted(n for n in self.queue if n[0] == watcher)
        follow_ups = []
        for _, target, _since in taken:
            pair = (watcher, target)
            step = self._fire(pair, self.effective(pair), DRAIN)
            self._write(pair, step.positions)
            if step.notice_since is not None:
                follow_ups.append((watcher, target, step.notice_since))
        self.queue -= set(taken)
        for notice in follow_ups:
            self._queue(notice)
        return taken

    def restart(self) -> None:
        self.queue = set()
        for pair in sorted(self.cursors):
            last, notified, _ = self.cursors[pair]
            if notified > last and pair[0] in self.sessions:  # the store's cursors_behind()
                step = self._fire(pair, self.effective(pair), RESTART_SWEEP)
                self._write(pair, step.positions)
                if step.notice_since is not None:
                    self._queue((pair[0], pair[1], step.notice_since))

    def prune(self) -> Event:
        oldest = self.events[0]
        session = oldest[1]
        if self.write_back_on_prune:  # R7/R13: persist the effective watermark first
            for pair in [p for p in self.cursors if p[1] == session]:
                last, notified, _ = self.cursors[pair]
                if notified > last:
                    self.cursors[pair] = self._effective_stored(pair)
        self.pruned[session] = max(self.pruned[session], oldest[0])
        self.events.pop(0)
        return oldest

    def reset(self, watcher: str) -> None:
        for pair in sorted(p for p in self.cursors if p[0] == watcher):
            self._write(pair, self._fire(pair, self.effective(pair), RESET_WATCHER).positions)
        self.queue = {n for n in self.queue if n[0] != watcher}

    def delete(self, session: str) -> None:
        for pair in sorted(p for p in self.cursors if session in p):
            self._write(pair, self._fire(pair, self.effective(pair), DELETE_SESSION).positions)
        self.queue = {n for n in self.queue if n[0] != session}
        self.events = [e for e in self.events if e[1] != session]
        self.sessions.discard(session)
        del self.heads[session], self.pruned[session]

    def watch(self, watcher: str, target: str, provenance: str = PROVENANCE_EXPLICIT) -> bool:
        pair = (watcher, target)
        step = self._fire(pair, self.effective(pair), SEED, self.heads[target])
        self._write(pair, step.positions)
        self.provenance[pair] = registered_provenance(self.provenance.get(pair), provenance)
        return step.state == "unwatched"

    def unwatch(self, watcher: str, target: str) -> bool:
        pair = (watcher, target)
        step = self._fire(pair, self.effective(pair), UNWATCH)
        self._write(pair, step.positions)
        return step.state != "unwatched"

    # -- observation ---------------------------------------------------------------------

    def positions(self) -> dict[Pair, tuple[int, int, int]]:
        return {pair: self._effective_stored(pair) for pair in self.cursors}


@dataclass(slots=True)
class SharedMachWorld(MachWorld):
    """The machine path of several processes on one database (spec section 6a).

    The durable part is ``MachWorld``'s. Each process has its own queue and its own view of
    the claims (what ``Cluster`` holds in memory: refreshed by its sweep, its attach and its
    restart). ``MachWorld.queue`` is used as the commit's outbox: the notices an action
    released, which enter the acting process's queue only for the watchers it serves (R19).
    The drain is R21's (by the durable cursors), the sweep R22's (the abstraction reconciles
    every watcher; which watchers the real sweep visits is tested in ``tests/multiproc``).
    """

    queues: list[set[Notice]] = field(default_factory=list)
    views: list[dict[str, int]] = field(default_factory=list)  # watcher -> claimant, as seen
    claims: dict[str, int] = field(default_factory=dict)  # durable: watcher -> claimant

    @classmethod
    def initial(cls, sessions: tuple[str, ...], pairs: tuple[Pair, ...], ambient: frozenset[Pair] = frozenset(),
                **options: Unpack[MachOptions]) -> "MachWorld":
        return cls.shared(sessions, pairs, 2, ambient, **options)

    @classmethod
    def shared(cls, sessions: tuple[str, ...], pairs: tuple[Pair, ...], processes: int,
               ambient: frozenset[Pair] = frozenset(), **options: Unpack[MachOptions]) -> "SharedMachWorld":
        world = cls(set(sessions), heads={s: 0 for s in sessions}, pruned={s: 0 for s in sessions},
                    queues=[set() for _ in range(processes)], views=[{} for _ in range(processes)], **options)
        for pair in pairs:
            world.watch(*pair, "ambient" if pair in ambient else PROVENANCE_EXPLICIT)
        world.woken = []
        return world

    def copy(self) -> "SharedMachWorld":
        return SharedMachWorld(set(self.sessions), list(self.events), dict(self.heads), dict(self.pruned),
                               dict(self.cursors), set(self.queue), self.next_seq, self.check_bound,
                               self.write_back_on_prune, self.ambient_wakes, dict(self.provenance), [],
                               [set(q) for q in self.queues], [dict(v) for v in self.views], dict(self.claims))

    def _queue(self, notice: Notice) -> None:
        self.queue.add(notice)  # the outbox: a wake is decided where the notice enters a queue

    def _enter(self, process: int, notices: set[Notice]) -> None:
        """``notices`` enter this process's queue; each new one asks its wake (R12, R26) and
        replaces the text an earlier episode of its pair left there (R5: another process ended
        that episode before this one's sweep)."""
        queue = self.queues[process]
        for notice in sorted(notices - queue):
            self._ask_wake((notice[0], notice[1]))
            queue -= {n for n in queue if (n[0], n[1]) == (notice[0], notice[1])}
        queue |= notices

    def serves(self, process: int, watcher: str) -> bool:
        """R19 as the process sees it (every process's patterns are ``*``)."""
        return self.views[process].get(watcher, process) == process

    def _release(self, process: int) -> None:
        """After the commit: the outbox's notices enter this process's queue where it serves."""
        self._enter(process, {n for n in self.queue if self.serves(process, n[0])})
        self.queue = set()

    def _withdraw(self, process: int, gone: set[Pair], watcher: str | None = None) -> None:
        """``remove``'s withdrawal, in the acting process only (the others' sweeps follow)."""
        self.queues[process] = {n for n in self.queues[process] if (n[0], n[1]) not in gone and n[0] != watcher}

    def pending_notices(self, watcher: str) -> set[Notice]:
        """The notices the durable cursors owe the watcher: one per pending pair, for its L."""
        out = set()
        for pair in self.cursors:
            if pair[0] == watcher:
                last, notified, _ = self._effective_stored(pair)
                if last < notified:
                    out.add((watcher, pair[1], last))
        return out

    def _reconcile(self, process: int, watcher: str) -> None:
        owed = self.pending_notices(watcher) if self.serves(process, watcher) else set()
        kept = {n for n in self.queues[process] if n[0] != watcher or n in owed}
        self.queues[process] = kept
        self._enter(process, owed)

    # -- actions ---------------------------------------------------------------------------

    def event(self, target: str, actor: str | None, notifying: bool, process: int | None = None) -> int:
        seq = MachWorld.event(self, target, actor, notifying)
        if process is None:
            assert not self.queue, "an event that names no process released notices"
        else:
            self._release(process)
        return seq

    def drain(self, watcher: str, process: int) -> list[Notice]:  # type: ignore[override]
        """R21: one line per pending pair, for the durable cursor's L, whatever is queued here;
        this process's queued notices for the watcher go; its follow-ups stay if it serves W."""
        delivered: list[Notice] = []
        for pair in sorted(p for p in self.cursors if p[0] == watcher):
            positions = self.effective(pair)
            assert positions is not None
            if positions.last_seen == positions.notified:
                continue  # R17: not pending, nothing to deliver (a queued notice is stale)
            step = self._fire(pair, positions, DRAIN)
            self._write(pair, step.positions)
            delivered.append((watcher, pair[1], positions.last_seen))
            if step.notice_since is not None:
                self.queue.add((watcher, pair[1], step.notice_since))
        self.queues[process] = {n for n in self.queues[process] if n[0] != watcher}
        self._release(process)
        return delivered

    def sweep(self, process: int) -> None:
        """R22: learn the claims, then queue what the durable cursors owe the watchers served
        here and withdraw every other notice (stale L, pair gone, watcher not served)."""
        self.views[process] = dict(self.claims)
        for watcher in sorted(self.sessions | {n[0] for n in self.queues[process]}):
            self._reconcile(process, watcher)

    def attach(self, watcher: str, process: int) -> None:
        """R20: the last attach wins; the attaching process queues the owed notices (R18)."""
        self.claims[watcher] = process
        self.views[process][watcher] = process
        self._reconcile(process, watcher)

    def restart(self, process: int | None = None) -> None:
        """Close (its claims go) and reopen: the startup sweep (R11), then the queue holds the
        notices of the watchers it serves."""
        assert process is not None, "a restart names its process"
        self.claims = {w: p for w, p in self.claims.items() if p != process}
        self.views[process] = dict(self.claims)
        self.queues[process] = set()
        MachWorld.restart(self)
        self._release(process)

    def reset(self, watcher: str, process: int | None = None) -> None:
        assert process is not None, "a reset names its process"
        gone = {p for p in self.cursors if p[0] == watcher}
        MachWorld.reset(self, watcher)
        self._withdraw(process, gone, watcher)

    def delete(self, session: str, process: int | None = None) -> None:
        assert process is not None, "a delete names its process"
        gone = {p for p in self.cursors if session in p}
        MachWorld.delete(self, session)
        self._withdraw(process, gone, session)

    def unwatch(self, watcher: str, target: str, process: int | None = None) -> bool:
        assert process is not None, "an unwatch names its process"
        removed = MachWorld.unwatch(self, watcher, target)
        self._withdraw(process, {(watcher, target)})
        return removed
