"""Replay model-check traces against the real ``Gateway`` on a SQLite file.

Abstract sessions become agent-qualified keys; the abstract prune (drop the oldest retained
event) becomes a real prune with ``max_rows`` one below the row count; restart closes and
reopens the file (the startup sweep runs). After every step the real gateway must match the
reference model run on the same trace: positions, queued notice texts, state versions, and
``changesSince`` answers (sequences, actor ids, historyGap, earliest available sequence).
The clock moves one minute per step, past the wake window, so every wake the gateway decides
reaches ``on_wake``: the ambient pair (world.AMBIENT) must never wake its watcher (R26), and
every watcher the reference asks to wake must be woken in that step (R12).

Two-process traces run on two gateways sharing one file, each a server without the pump
thread (the trace's ``sweep`` runs ``sweep_changes``); there each process's queue must be the
machine path's for that process (in step with the other's commits or not), and each drain
must deliver the reference's lines.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from collections.abc import Set
from typing import cast

from ..facade.gateway import Gateway
from ..shared.formats import notice_text
from .machinepath import SharedMachWorld
from .modelcheck import apply
from .refmodel import Notice, RefWorld
from .world import AMBIENT, PAIRS, SESSIONS, Action, describe, process_of

KEYS = {"A": "agent:a:main", "B": "agent:b:main", "C": "agent:c:main"}
NAMES = {key: name for name, key in KEYS.items()}
NOW = 1_700_000_000.0  # nothing expires in a trace's minutes: retention is driven by max_rows
STEP_SECONDS = 60.0  # past the 20 s wake window (R12)


class ReplayWakes:
    """The clock every replayed gateway reads and the wakes they sent, as abstract pairs."""

    def __init__(self) -> None:
        self.now = NOW
        self.sent: list[tuple[str, str]] = []

    def clock(self) -> float:
        return self.now

    def on_wake(self, watcher: str, reason: str) -> None:
        target = reason.removeprefix("session-state: ")
        self.sent.append((NAMES.get(watcher, watcher), NAMES.get(target, target)))

    def next_step(self) -> None:
        self.now += STEP_SECONDS
        self.sent = []

    def differences(self, ref: RefWorld, ambient: Set[tuple[str, str]]) -> list[str]:
        out = [f"R26: the ambient pair {pair} woke {pair[0]}" for pair in self.sent if pair in ambient]
        asked = {w for w, _ in ref.model.wake_requests}
        woken = {w for w, _ in self.sent}
        out += [f"R12: the reference wakes {w}, the gateway did not" for w in sorted(asked - woken)]
        return out


def open_replayed(url: str, wakes: ReplayWakes) -> Gateway:
    """A gateway on ``url`` that reads the replay's clock and reports its wakes to it.

    The small world has no `created` event and no announcement line (R27): without them the
    real gateway's sequence numbers and queues are the model's."""
    return Gateway.open(url, clock=wakes.clock, on_wake=wakes.on_wake, record_created=False,
                        notify_on_create=False)


def apply_real(gw: Gateway, url: str, action: Action, wakes: ReplayWakes) -> Gateway:
    """Run one model-check action on the real gateway; returns the gateway to go on with (a
    restart or crash closes ``gw`` and opens a new one). Also the SPIN trail replay's (spin.py)."""
    kind = action[0]
    if kind == "event":
        _, target, actor, notifying = action
        gw.record_event(
            KEYS[target],
            "human_direct_message" if notifying else "run_completed",
            actor_type="human" if actor is None else "agent",
            actor_id=None if actor is None else KEYS[actor],
            summary="model-check event",
        )
    elif kind == "drain":
        gw.drain_system_events(KEYS[action[1]])
    elif kind in ("restart", "crash"):  # a crash is a restart to the protocol (its wake is lost)
        gw.close()
        return open_replayed(url, wakes)
    elif kind == "tick":  # the wake window passes (every step is past it): fire what is owed
        gw.ops.fire_due_wakes()
    elif kind == "prune":
        gw.ops.max_rows = gw.store.event_count() - 1
        gw.prune()
    elif kind == "reset":
        gw.ops.reset_session(KEYS[action[1]])
    elif kind == "delete":
        gw.ops.delete_session(KEYS[action[1]])
    elif kind == "watch":
        gw.watch(KEYS[action[1]], KEYS[action[2]], ambient=action[3] == "ambient")
    elif kind == "unwatch":
        gw.unwatch(KEYS[action[1]], KEYS[action[2]])
    return gw


def differences(gw: Gateway, ref: RefWorld, *, queues: bool = True) -> list[str]:
    out: list[str] = []
    for watcher, target in PAIRS:
        if watcher in ref.sessions and target in ref.sessions:
            got = gw.ops.cursor_positions(KEYS[watcher], KEYS[target])
            want = ref.positions().get((watcher, target))
            if (tuple(got) if got else None) != want:
                out.append(f"positions ({watcher}, {target}): real {got} != model {want}")
    for session in SESSIONS:
        if session not in ref.sessions:
            if gw.ops.session_exists(KEYS[session]):
                out.append(f"{session} was deleted but still exists")
            continue
        want_q = sorted(notice_text(KEYS[t], s) for w, t, s in ref.queue if w == session)
        got_q = sorted(gw.pending_system_events(KEYS[session]))
        if queues and got_q != want_q:
            out.append(f"queue of {session}: real {got_q} != model {want_q}")
        sinces = {0, ref.heads[session], ref.pruned[session], max(ref.pruned[session] - 1, 0)}
        sinces |= {c[0] for (w, t), c in ref.cursors.items() if t == session}
        for since in sorted(sinces):
            status = gw.session_status(KEYS[session], changes_since=since)
            changes = status["stateChanges"]
            got_status = ([(e["sequence"], e.get("actorId")) for e in changes["events"]], changes["historyGap"],
                          changes["earliestAvailableSequence"], status["stateVersion"])
            mine = [e for e in ref.events if e[1] == session]
            want_status = ([(e[0], None if e[3] is None else KEYS.get(e[3])) for e in mine if e[0] > since],
                           since < ref.pruned[session], mine[0][0] if mine else None, ref.heads[session])
            if got_status != want_status:
                out.append(f"session_status {session} changesSince {since}: real {got_status} != model {want_status}")
    return out


def replay_trace(trace: list[Action], directory: Path | None = None) -> list[str]:
    """Run ``trace`` on a fresh file; returns the first step's differences (empty when equal)."""
    with tempfile.TemporaryDirectory(prefix="sessionstate-replay-", dir=directory) as tmp:
        url = f"sqlite:///{Path(tmp) / 'state.db'}"
        wakes = ReplayWakes()
        gw = open_replayed(url, wakes)
        try:
            for key in KEYS.values():
                gw.create_session(key)
            for watcher, target in PAIRS:
                gw.watch(KEYS[watcher], KEYS[target], ambient=(watcher, target) in AMBIENT)
            ref = RefWorld.initial(SESSIONS, PAIRS, AMBIENT)
            for index, action in enumerate(trace):
                wakes.next_step()
                ref.model.wake_requests = []
                ambient = ref.ambient_pairs()
                gw = apply_real(gw, url, action, wakes)
                apply(ref, action)
                diff = differences(gw, ref) + wakes.differences(ref, ambient | ref.ambient_pairs())
                if diff:
                    steps = [f"{i + 1}. {describe(a)}" for i, a in enumerate(trace[: index + 1])]
                    return steps + diff
        finally:
            gw.close()
    return []


# -- two processes (spec section 6a) -----------------------------------------------------------


def _open_server(url: str, wakes: ReplayWakes) -> Gateway:
    """A gateway that is a server (claims, sweeps) without the pump thread: the replay sweeps
    when the trace says so."""
    gw = open_replayed(url, wakes)
    gw.cluster.register()
    return gw


def apply_real_process(gws: list[Gateway], url: str, action: Action, wakes: ReplayWakes) -> list[str] | None:
    """Run one two-process action on the real gateways; returns a drain's lines."""
    kind, process = action[0], process_of(action)
    gw = gws[0 if process is None else process]
    if kind == "event":
        apply_real(gw, url, action[:4], wakes)
    elif kind == "drain":
        return gw.drain_system_events(KEYS[action[1]])
    elif kind == "sweep":
        gw.cluster.sweep()
    elif kind == "attach":
        gw.cluster.attach(KEYS[action[1]])
    elif kind in ("restart", "crash"):
        assert process is not None
        gw.close()
        gws[process] = _open_server(url, wakes)
    elif kind == "tick":
        for each in gws:
            each.ops.fire_due_wakes()
    elif kind in ("prune", "watch"):
        apply_real(gw, url, action, wakes)
    else:  # reset, delete, unwatch: the same calls, in the named process
        apply_real(gw, url, action[:-1], wakes)
    return None


def process_differences(gws: list[Gateway], mach: SharedMachWorld) -> list[str]:
    """Each real process's queue must be the machine path's for that process, in step with
    the other process's commits or not."""
    out: list[str] = []
    for process, gw in enumerate(gws):
        for session in SESSIONS:
            if session not in mach.sessions:
                continue
            want = sorted(notice_text(KEYS[t], s) for w, t, s in mach.queues[process] if w == session)
            got = sorted(gw.pending_system_events(KEYS[session]))
            if got != want:
                out.append(f"queue of {session} in process {process}: real {got} != machine path {want}")
    return out


def replay_two_process_trace(trace: list[Action], directory: Path | None = None) -> list[str]:
    """Run a two-process ``trace`` on two real gateways sharing a fresh file; after every step
    the durable state must be the reference's, each process's queue the machine path's, and
    a drain's lines the ones the reference delivers (INV10). Returns the first differences."""
    with tempfile.TemporaryDirectory(prefix="sessionstate-replay-", dir=directory) as tmp:
        url = f"sqlite:///{Path(tmp) / 'state.db'}"
        wakes = ReplayWakes()
        first = open_replayed(url, wakes)
        gws: list[Gateway] = []
        try:
            for key in KEYS.values():
                first.create_session(key)
            for watcher, target in PAIRS:
                first.watch(KEYS[watcher], KEYS[target], ambient=(watcher, target) in AMBIENT)
            first.close()
            gws = [_open_server(url, wakes), _open_server(url, wakes)]
            ref = RefWorld.initial(SESSIONS, PAIRS, AMBIENT)
            mach = SharedMachWorld.shared(SESSIONS, PAIRS, 2, AMBIENT)
            for index, action in enumerate(trace):
                wakes.next_step()
                ambient = ref.ambient_pairs()
                lines = apply_real_process(gws, url, action, wakes)
                delivered = apply(ref, action)
                apply(mach, action)
                diff = differences(gws[0], ref, queues=False) + process_differences(gws, mach)
                # Which process wakes differs from the reference's single queue: R26 only.
                diff += [f"R26: the ambient pair {pair} woke {pair[0]}" for pair in wakes.sent
                         if pair in ambient | ref.ambient_pairs()]
                if lines is not None:
                    want = sorted(notice_text(KEYS[t], s) for _, t, s in cast(list[Notice], delivered))
                    if sorted(lines) != want:
                        diff.append(f"drain delivered: real {sorted(lines)} != reference {want}")
                if diff:
                    steps = [f"{i + 1}. {describe(a)}" for i, a in enumerate(trace[: index + 1])]
                    return steps + diff
        finally:
            for gw in gws:
                gw.close()
    return []
