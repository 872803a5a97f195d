"""An abstract reference model of the notice protocol, written from the spec's facts.

It imports nothing from ``sessionstate.statemachine`` on purpose: it is the independent side
of the model check. It follows the reference algorithm literally, with *eager* material
updates (every material event writes every watcher's ``material`` at once), no transition
table and no lazy derivation, so agreeing with the machine path checks rule R7 too.

It also tracks *obligations*: each material event on T by an actor other than W, above W's
seed, owes W a notice until W acknowledges it (L >= sequence) or the pair goes away.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Event = tuple[int, str, bool, "str | None"]  # (sequence, session, notifying, actor)
Pair = tuple[str, str]
Cursor = tuple[int, int, int, int]  # (last_seen, notified, material, seed)
Notice = tuple[str, str, int]  # (watcher, target, changesSince)
Obligation = tuple[str, str, int]  # (watcher, target, sequence)


@dataclass(slots=True)
class RefWorld:
    sessions: set[str]
    events: list[Event] = field(default_factory=list)  # retained, ascending
    heads: dict[str, int] = field(default_factory=dict)
    pruned: dict[str, int] = field(default_factory=dict)
    cursors: dict[Pair, Cursor] = field(default_factory=dict)
    queue: set[Notice] = field(default_factory=set)
    owed: set[Obligation] = field(default_factory=set)
    next_seq: int = 1

    @classmethod
    def initial(cls, sessions: tuple[str, ...], pairs: tuple[Pair, ...]) -> "RefWorld":
        world = cls(set(sessions), heads={s: 0 for s in sessions}, pruned={s: 0 for s in sessions})
        for pair in pairs:
            world.watch(*pair)
        return world

    def copy(self) -> "RefWorld":
        return RefWorld(set(self.sessions), list(self.events), dict(self.heads), dict(self.pruned),
                        dict(self.cursors), set(self.queue), set(self.owed), self.next_seq)

    # -- actions -------------------------------------------------------------------------

    def event(self, target: str, actor: str | None, notifying: bool) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self.events.append((seq, target, notifying, actor))
        self.heads[target] = seq
        if not notifying:
            return seq
        for (watcher, t), (last, notified, _material, seed) in list(self.cursors.items()):
            if t != target or watcher == actor:  # R2: the watcher's own act owes it nothing
                continue
            if notified == last:  # first unacknowledged change freezes the watermark
                notified = seq
            self.cursors[(watcher, t)] = (last, notified, seq, seed)
            self._enqueue(watcher, t, last)
            self.owed.add((watcher, t, seq))
        return seq

    def drain(self, watcher: str) -> list[Notice]:
        taken = sorted(n for n in self.queue if n[0] == watcher)
        self.queue -= set(taken)
        follow_ups = []
        for _, target, _since in taken:
            last, notified, material, seed = self.cursors[(watcher, target)]
            # R8: acknowledge up to the frozen watermark only.
            self.cursors[(watcher, target)] = (notified, max(material, notified), material, seed)
            self._discharge(watcher, target, notified)
            if material > notified:
                follow_ups.append((watcher, target, notified))
        for notice in follow_ups:
            self._enqueue(*notice)
        return taken

    def restart(self) -> None:
        self.queue = set()
        for (watcher, target), (last, _notified, material, seed) in sorted(self.cursors.items()):
            if material > last:
                self.cursors[(watcher, target)] = (last, material, material, seed)
                self._enqueue(watcher, target, last)

    def prune(self) -> Event:
        """Abstract retention: drop the oldest retained event."""
        oldest = self.events.pop(0)
        self.pruned[oldest[1]] = max(self.pruned[oldest[1]], oldest[0])
        return oldest

    def reset(self, watcher: str) -> None:
        for pair in [p for p in self.cursors if p[0] == watcher]:
            self._remove(pair)
        self.queue = {n for n in self.queue if n[0] != watcher}

    def delete(self, session: str) -> None:
        for pair in [p for p in self.cursors if session in p]:
            self._remove(pair)
        self.queue = {n for n in self.queue if n[0] != session}
        self.events = [e for e in self.events if e[1] != session]
        self.sessions.discard(session)
        del self.heads[session], self.pruned[session]

    def watch(self, watcher: str, target: str) -> bool:
        if (watcher, target) in self.cursors:
            return False
        version = self.heads[target]
        self.cursors[(watcher, target)] = (version, version, version, version)
        return True

    def unwatch(self, watcher: str, target: str) -> bool:
        if (watcher, target) not in self.cursors:
            return False
        self._remove((watcher, target))
        return True

    # -- helpers -------------------------------------------------------------------------

    def _enqueue(self, watcher: str, target: str, since: int) -> None:
        self.queue.add((watcher, target, since))

    def _remove(self, pair: Pair) -> None:
        del self.cursors[pair]
        self.queue = {n for n in self.queue if (n[0], n[1]) != pair}
        self.owed = {o for o in self.owed if (o[0], o[1]) != pair}

    def _discharge(self, watcher: str, target: str, upto: int) -> None:
        self.owed = {o for o in self.owed if not (o[0] == watcher and o[1] == target and o[2] <= upto)}

    # -- observation ---------------------------------------------------------------------

    def positions(self) -> dict[Pair, tuple[int, int, int]]:
        return {pair: c[:3] for pair, c in self.cursors.items()}

    def delta(self, session: str, since: int) -> tuple[list[int], bool]:
        """changesSince: retained sequences above ``since`` and the historyGap flag."""
        return [e[0] for e in self.events if e[1] == session and e[0] > since], since < self.pruned[session]
