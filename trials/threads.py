"""Threads recording through one gateway: every call returns (LIV3), each only after its commit.

The group commit (``services/notice/group_commit.py``) hands a queued caller's events to the
thread that holds the write turn and puts the caller to sleep until a commit holds them. The
model check, the SPIN model and the process trials each run one thread per gateway, so none
of them can see a caller that is never woken. This trial can: ``threads`` threads share one
gateway on a fresh database (scratch.py), each making ``calls`` seeded calls: a lone event
(most), a burst, a burst inside the caller's own ``Gateway.transaction()`` (which never
waits for a batch), a burst holding the write turn (``Gateway.locked()``: it commits the
queue along with its own events), or a drain. One more thread runs an event loop whose
coroutines make the same calls (but the transaction and the lock) through an ``AsyncGateway``
over the same gateway: its worker thread joins the group commit as one more caller. A
watchdog fails the trial as soon as one call has not returned after ``deadline`` seconds.
After every call that returned sequences, with a seeded probability, a second gateway on its
own connection reads the last of them back: a call that returned before its commit shows
there as a missing event.

Checks, after all threads returned: no sequence returned twice; every returned event is in
the log with its session and summary, and the log holds no event of the trial that was not
returned (nothing committed behind a caller's back, nothing returned and not committed); a
burst's events are in its order with no other event between them (R9); each head is the
largest sequence of its session; every pair's positions are ordered (INV1) and its material
position is the newest notifying event on its target by another actor (nothing a batch
decided for one caller was lost for another's watcher); no call raised and none returned
``None``.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from sessionstate.facade.aio import AsyncGateway
from sessionstate.facade.gateway import Gateway
from .scratch import scratch_database

TARGETS = tuple(f"agent:t{i}:main" for i in range(4))
WATCHERS = ("agent:w:main", "agent:w:subagent:helper")  # one main-style, one sub-agent watcher
NOTIFYING, LOG_ONLY = "human_direct_message", "run_completed"
DEADLINE_SECONDS = 30.0  # a call queued behind the others returns in milliseconds
VERIFY_SHARE = 0.125  # calls whose last sequence is read back at once by another connection
ASYNC_TASKS = 4  # coroutines calling through an AsyncGateway, on one more thread's event loop


@dataclass
class Call:
    """One call a thread made: what it asked for and what it got."""

    thread: int
    kind: str  # "event", "burst", "own_transaction", "lock_holder", "drain", "async_event", "async_burst"
    events: list[tuple[str, str, str | None, str]]  # (target, kind, actor_id, summary)
    sequences: list[int | None] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


@dataclass
class ThreadsReport:
    threads: int
    calls_per_thread: int
    calls: int = 0
    recorded: int = 0
    read_back: int = 0  # sequences another connection read at once after their call returned
    seconds: float = 0.0
    slowest_call_ms: float = 0.0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


class _Trial:
    """The shared state of one run: the gateway, the reader, the calls made so far."""

    def __init__(self, gw: Gateway, reader: Gateway, seed: int) -> None:
        self.gw, self.reader, self.seed = gw, reader, seed
        self.reader_lock = threading.Lock()  # the reader is a second gateway: one call at a time
        self.calls: list[Call] = []
        self.read_back = 0
        self.not_visible: list[str] = []
        self.started: dict[int, tuple[float, Call]] = {}  # thread -> its call in progress

    def run_thread(self, index: int, calls: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        for n in range(calls):
            call = self._plan(rng, index, n)
            with self._timed(index, call, rng):
                self._make(call)

    @contextmanager
    def _timed(self, index: int, call: Call, rng: random.Random) -> Iterator[None]:
        """Around one call of caller ``index``: the watchdog sees it while it runs; an error is
        a finding, kept with the call; then, now and then, its last sequence is read back."""
        self.started[index] = (time.monotonic(), call)
        began = time.perf_counter()
        try:
            yield
        except Exception as exc:
            call.error = f"{type(exc).__name__}: {exc}"
        call.seconds = time.perf_counter() - began
        del self.started[index]
        self.calls.append(call)
        if call.sequences and call.sequences[-1] is not None and rng.random() < VERIFY_SHARE:
            self._read_back(call)

    def run_async(self, first: int, tasks: int, calls: int) -> None:
        """The async API's callers: ``tasks`` coroutines on one event loop in this thread, each
        making ``calls`` calls through an ``AsyncGateway`` over the same gateway (its worker
        thread feeds the same group commit)."""
        anyio.run(self._async_callers, first, tasks, calls)

    async def _async_callers(self, first: int, tasks: int, calls: int) -> None:
        agw = AsyncGateway(self.gw, owns_gateway=False)
        try:
            async with anyio.create_task_group() as group:
                for index in range(first, first + tasks):
                    group.start_soon(self._async_caller, agw, index, calls)
        finally:
            await agw.close()

    async def _async_caller(self, agw: AsyncGateway, index: int, calls: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        for n in range(calls):
            call = self._plan(rng, index, n)
            if call.kind != "drain":  # a transaction or the lock is no coroutine's to hold
                call.kind = "async_event" if len(call.events) == 1 else "async_burst"
            with self._timed(index, call, rng):
                if call.kind == "drain":
                    await agw.drain_system_events(call.events[0][0])  # type: ignore[attr-defined]
                else:
                    call.sequences = await agw.record_events(_items(call))

    def _plan(self, rng: random.Random, index: int, n: int) -> Call:
        roll = rng.random()
        if roll < 0.05:
            return Call(index, "drain", [(rng.choice(WATCHERS), "", None, "")])
        kind = ("event" if roll < 0.7 else "burst" if roll < 0.85 else "own_transaction" if roll < 0.93
                else "lock_holder")
        size = 1 if kind == "event" else rng.randint(2, 4)
        events = []
        for k in range(size):
            actor = rng.choice((None, None, None) + WATCHERS)
            events.append((rng.choice(TARGETS), NOTIFYING if rng.random() < 0.8 else LOG_ONLY, actor,
                           f"t{index}.{n}.{k}"))
        return Call(index, kind, events)

    def _make(self, call: Call) -> None:
        gw = self.gw
        if call.kind == "drain":
            gw.drain_system_events(call.events[0][0])
            return
        items = _items(call)
        if call.kind == "event":
            (target, kind, actor, summary), = call.events
            call.sequences = [gw.record_event(target, kind, summary=summary, actor_id=actor,
                                              actor_type="human" if actor is None else "agent")]
        elif call.kind == "burst":
            call.sequences = gw.record_events(items)
        elif call.kind == "own_transaction":
            with gw.transaction():
                call.sequences = gw.record_events(items)
        else:  # holding the write turn outside a transaction: commits the queue along with it
            with gw.locked():
                call.sequences = gw.record_events(items)

    def _read_back(self, call: Call) -> None:
        target, sequence = call.events[-1][0], call.sequences[-1]
        assert sequence is not None
        with self.reader_lock, self.reader.locked() as store:
            found = store.events_after(*_ref(target), sequence - 1, 1)
        self.read_back += 1
        if not found or found[0].sequence != sequence:
            self.not_visible.append(f"R9: thread {call.thread}'s {call.kind} returned {sequence} on {target},"
                                    " but another connection does not see it right after: returned before its commit")

    def stuck(self, deadline: float) -> list[str]:
        now = time.monotonic()
        return [f"LIV3: caller {index}'s {call.kind} call ({len(call.events)} event(s)) has not returned after"
                f" {now - since:.1f} s: a queued caller was never woken"
                for index, (since, call) in list(self.started.items()) if now - since > deadline]


def _items(call: Call) -> list[dict[str, Any]]:
    """``record_events``' items for the call's events."""
    return [{"session_key": target, "kind": kind, "summary": summary,
             "actor_type": "human" if actor is None else "agent", "actor_id": actor}
            for target, kind, actor, summary in call.events]


def _ref(target: str) -> tuple[str, str]:
    """(key, agent id) of a trial session: ``agent:<id>:main``."""
    return target, target.split(":")[1]


def run_threads(calls: int, *, threads: int = 8, seed: int = 0, database: str | None = None,
                deadline: float = DEADLINE_SECONDS, async_tasks: int = ASYNC_TASKS) -> ThreadsReport:
    """``threads`` threads, and ``async_tasks`` coroutines on one more thread's event loop,
    making ``calls`` calls each on one gateway (see the module)."""
    report = ThreadsReport(threads, calls)
    with scratch_database(database) as url:
        gw = Gateway.open(url, record_created=False, notify_on_create=False)
        reader = Gateway.open(url, serve=[], record_created=False, notify_on_create=False)
        stuck: list[str] = []
        try:
            for key in TARGETS + WATCHERS:
                gw.create_session(key)
            for watcher in WATCHERS:
                for target in TARGETS:
                    gw.watch(watcher, target)
            seeded = {(w, t): gw.ops.cursor_positions(w, t) for w in WATCHERS for t in TARGETS}
            trial = _Trial(gw, reader, seed)
            workers = [threading.Thread(target=trial.run_thread, args=(i, calls), daemon=True,
                                        name=f"threads-trial-{i}") for i in range(threads)]
            if async_tasks:
                workers.append(threading.Thread(target=trial.run_async, args=(threads, async_tasks, calls),
                                                daemon=True, name="threads-trial-loop"))
            began = time.perf_counter()
            for worker in workers:
                worker.start()
            while any(w.is_alive() for w in workers) and not stuck:
                stuck = trial.stuck(deadline)
                time.sleep(0.05)
            report.seconds = time.perf_counter() - began
            report.failures += stuck
            if not stuck:
                report.failures += trial.not_visible + _check(gw, trial.calls, seeded)
            report.calls = len(trial.calls)
            report.read_back = trial.read_back
            report.recorded = sum(len(c.sequences) for c in trial.calls)
            report.slowest_call_ms = max((c.seconds for c in trial.calls), default=0.0) * 1000
        finally:
            reader.close()
            if not stuck:  # a stuck caller's gateway is left to the process's end
                gw.close()
    return report


def _check(gw: Gateway, calls: list[Call], seeded: dict[tuple[str, str], Any]) -> list[str]:
    failures = [f"thread {c.thread}'s {c.kind} call raised {c.error}" for c in calls if c.error]
    returned: dict[int, tuple[str, str, str | None, str]] = {}
    for call in calls:
        if call.kind == "drain" or call.error:
            continue
        if any(s is None for s in call.sequences) or len(call.sequences) != len(call.events):
            failures.append(f"R15: thread {call.thread}'s {call.kind} call returned {call.sequences}")
            continue
        for sequence, event in zip(call.sequences, call.events):
            if sequence in returned:
                failures.append(f"sequence {sequence} returned twice: {returned[sequence][3]} and {event[3]}")
            returned[int(sequence)] = event  # type: ignore[arg-type]
    logged: dict[int, tuple[str, str, str | None, str]] = {}
    with gw.locked() as store:
        for target in TARGETS:
            for record in store.events_after(*_ref(target), 0, 1_000_000):
                logged[record.sequence] = (target, record.kind, record.actor_id, record.summary)
    for sequence, event in sorted(returned.items()):
        if logged.get(sequence) != event:
            failures.append(f"R9: returned sequence {sequence} ({event}) is in the log as {logged.get(sequence)}")
    for sequence in sorted(set(logged) - set(returned)):
        failures.append(f"the log holds {sequence} {logged[sequence]}, which no call returned")
    order = sorted(logged)
    for call in calls:
        if call.kind != "event" and call.sequences and not call.error and None not in call.sequences:
            span = order[order.index(call.sequences[0]):order.index(call.sequences[-1]) + 1] \
                if call.sequences[0] in logged and call.sequences[-1] in logged else []
            if span != call.sequences:
                failures.append(f"R9: thread {call.thread}'s burst {call.sequences} is not together and in order"
                                f" in the log ({span})")
    for target in TARGETS:
        on_target = [s for s, e in logged.items() if e[0] == target]
        head = gw.ops.state_version(target)
        if head != max(on_target, default=0):
            failures.append(f"head of {target} is {head}, its newest event {max(on_target, default=0)}")
        for watcher in WATCHERS:
            last, notified, material = gw.ops.cursor_positions(watcher, target)[:3]  # type: ignore[index]
            if not (last <= notified <= material and (last < notified or notified == material)):
                failures.append(f"INV1: {watcher} -> {target} positions {(last, notified, material)}")
            newest = max((s for s, e in logged.items()
                          if e[0] == target and e[1] == NOTIFYING and e[2] != watcher),
                         default=seeded[(watcher, target)][2])
            if material != newest:
                failures.append(f"{watcher} -> {target}: material position {material}, the newest notifying event"
                                f" by another actor is {newest} (a decision lost in a shared batch)")
    return failures
