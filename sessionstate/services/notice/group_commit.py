"""Group commit: concurrent recorders on one store share a transaction.

A recorder that finds the store's write turn free (nobody holds ``store.lock``) commits
alone, at once: one thread pays nothing for this module but one unlocked look at the queue.
A recorder that finds it taken hands its already validated events over (queues them) and
waits once, on an event of its own, until a commit that holds them has happened; only then
does it learn its sequences.

Who commits the queue: whoever holds the write turn when it finishes its own work. The
holder of the turn (a caller that committed alone, or the first caller that queued while
nobody was committing, the *drainer*) commits everything queued by then in one transaction,
wakes exactly those callers, and looks again, while it still holds the turn, for callers
that queued meanwhile; it leaves only when the queue is empty (or after ``MAX_ROUNDS``
batches, when it hands the turn to the first queued caller so that its own caller is not
kept). So a queued caller is never woken to take the lock: the thread that is already
running, with the lock and the interpreter, commits for it (the first version handed the
turn to a new leader after every batch, a thread switch and a lock hand-over per batch).

After a batch that held queued callers, an empty queue usually means the callers just woken
have not been scheduled yet: the drainer waits on a condition (holding the lock, not the
interpreter) until as many have queued again as it woke, or ``GATHER_SECONDS`` passed, so
their next events join the next batch instead of each committing alone (a GIL convoy). The
callers of a batch are woken as a chain, each by the one before it, so that one woken thread
at a time wants the interpreter. One thread alone never queues, so it never waits for this.

A thread that already holds the lock (inside ``Gateway.transaction()`` or ``locked()``)
never queues: waiting for a drainer that needs the lock this thread holds would never end.
Inside a transaction it records in that transaction; holding the lock outside one, it
commits whatever is queued together with its own events.
"""

from __future__ import annotations

import _thread
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

_E = TypeVar("_E")

GATHER_SECONDS = 0.0005
"""How long a drainer waits for the callers it just woke to queue again (see above)."""

MAX_ROUNDS = 32
"""Batches one drainer commits before it hands the turn on (its own caller waits meanwhile)."""


class Signal:
    """What a queued caller sleeps on: ``threading.Event``'s set, clear and wait, on one bare
    lock (held while unset). An Event waits through a Condition and a lock of its own, in
    Python; this costs one lock operation (docs/performance-threads.md, "The floor of a
    hand-over": 3-6 µs less a hand-over, and about a tenth more throughput at 8 threads in
    paired runs)."""

    __slots__ = ("_unset",)

    def __init__(self) -> None:
        self._unset = _thread.allocate_lock()
        self._unset.acquire()

    def set(self) -> None:
        try:
            self._unset.release()
        except RuntimeError:  # set already
            pass

    def clear(self) -> None:
        self._unset.acquire(False)

    def is_set(self) -> bool:
        return not self._unset.locked()

    def wait(self, timeout: float | None = None) -> bool:
        """Until set (it stays set), or ``timeout`` seconds; whether it was set."""
        if not self._unset.acquire(timeout=-1 if timeout is None else timeout):
            return False
        self.set()  # waiting does not unset it (between the two a set() may come: no harm)
        return True


class Waiter(Generic[_E]):
    """One caller's events in the queue and, once its batch committed, its outcome."""

    __slots__ = ("events", "result", "error", "done", "wake", "promoted", "after", "queued_at", "committed_at", "batch")

    def __init__(self, events: Sequence[_E]) -> None:
        self.events = events
        self.result: list[Any] | None = None
        self.error: BaseException | None = None
        self.done = False
        self.wake: Signal | None = None  # set when done, or when handed the turn; only a queued caller has one
        self.promoted = False  # a drainer that left with callers queued handed this one the turn
        self.after: Waiter[_E] | None = None  # the next caller of its batch, woken by this one
        self.queued_at = 0.0  # the three below only while GroupCommit.timings is on
        self.committed_at = 0.0
        self.batch = 0

    def outcome(self) -> list[Any]:
        if self.error is not None:
            raise self.error
        assert self.result is not None  # set with done, or error was
        return self.result


BatchRunner = Callable[[list[Waiter[_E]]], None]
"""Commits the waiters' events (one transaction) and sets each waiter's result or error;
called holding the write turn."""


class GroupCommit(Generic[_E]):
    def __init__(
        self,
        lock: Any,
        in_transaction: Callable[[], bool],
        run_alone: Callable[[Sequence[_E]], list[Any]],
        run: BatchRunner[_E],
    ) -> None:
        self._lock = lock  # the store's RLock: the write turn
        self._in_transaction = in_transaction  # asked holding the lock: then it is this thread's
        self._run_alone = run_alone
        self._run = run
        self._state = threading.Lock()  # guards the two fields below and the waiters' flags
        self._queue: list[Waiter[_E]] = []
        self._arrived = threading.Condition(self._state)  # a caller queued while a drainer gathers
        self._expected = 0  # how many queued callers the gathering drainer waits for
        self._draining = False  # a queued caller is taking, or holds, the turn to drain the queue
        self.batches = 0  # batches of more than one caller committed (tests and benchmarks)
        self.gather = True  # give the interpreter away once after a shared batch (see above)
        # (queued_at, committed_at, woken_at, batch size) per queued call, perf_counter
        # seconds; None (off) unless a benchmark sets a list.
        self.timings: list[tuple[float, float, float, int]] | None = None

    def submit(self, events: Sequence[_E]) -> list[Any]:
        """Commit ``events`` (validated already) and return ``run``'s result for them."""
        lock = self._lock
        if not lock.acquire(False):  # another thread holds the turn (an RLock: never this one)
            return self._join(events)
        try:
            # The queue is read without ``_state``: a caller queued just after this look
            # is committed by the drain below or by its own drainer. The queue is looked at
            # first because it is cheaper to ask than the transaction, and mostly empty.
            if not self._queue:
                result = self._run_alone(events)
                # Callers queued while this one committed: take them along, unless this
                # thread is inside its own transaction (its caller's commit is not theirs).
                if self._queue and not self._in_transaction():
                    self._drain()
                return result
            if self._in_transaction():
                return self._run_alone(events)
            mine: Waiter[_E] = Waiter(events)
            self._commit([mine])
            self._drain()
            return mine.outcome()
        finally:
            lock.release()

    def submit_all(self, calls: Sequence[Sequence[_E]]) -> list[Waiter[_E]]:
        """Commit several callers' events as one group, with whatever is queued, waiting for
        the write turn (never from a thread inside its own transaction); returns a waiter per
        call holding its outcome."""
        waiters = [Waiter(events) for events in calls]
        with self._lock:
            self._commit(waiters)
            self._drain()
        return waiters

    def idle(self) -> bool:
        """Nobody queued and nobody draining (tests check no turn was left held)."""
        with self._state:
            return not self._queue and not self._draining

    def queued(self) -> int:
        """How many callers wait for a drainer's commit right now (tests synchronise on it)."""
        with self._state:
            return len(self._queue)

    def _commit(self, waiters: list[Waiter[_E]]) -> None:
        """Holding the write turn: commit ``waiters`` with every caller queued by now, as one
        group."""
        with self._state:
            batch, self._queue = self._queue + waiters, []
        self._commit_batch(batch)

    def _commit_batch(self, batch: list[Waiter[_E]]) -> None:
        """Holding the write turn: ``batch`` in one transaction; a failure answers whoever is
        still unanswered."""
        try:
            self._run(batch)
        except BaseException as exc:
            _fail_unanswered(batch, exc)
            raise
        finally:
            self._release(batch)

    def _drain(self, rounds: int = MAX_ROUNDS) -> None:
        """Holding the write turn: commit the queue until it is found empty, at most
        ``rounds`` batches."""
        for _ in range(rounds):
            with self._state:
                batch, self._queue = self._queue, []
            if not batch:
                return
            self._commit_batch(batch)
            woken = len(_chain(batch))
            if woken and self.gather:
                self._gather(woken)

    def _gather(self, expected: int) -> None:
        """Wait (holding the write turn, not the interpreter) until the ``expected`` callers
        just woken have queued their next events, or ``GATHER_SECONDS`` passed."""
        with self._arrived:
            self._expected = expected
            self._arrived.wait_for(lambda: len(self._queue) >= expected, GATHER_SECONDS)
            self._expected = 0

    def _release(self, batch: list[Waiter[_E]]) -> None:
        """Mark ``batch`` done and wake its first queued caller, which wakes the next one
        (``_pass_on``), and so on: one woken thread at a time wants the interpreter, instead
        of all of them at once while the drainer still runs."""
        timings = self.timings
        stamp = time.perf_counter() if timings is not None else 0.0
        with self._state:
            queued = _chain(batch)
            for waiter in batch:
                waiter.done = True
                waiter.committed_at, waiter.batch = stamp, len(batch)
            for waiter, nxt in zip(queued, queued[1:]):
                waiter.after = nxt
            if len(batch) > 1:
                self.batches += 1
        if queued:
            first = queued[0].wake
            assert first is not None
            first.set()

    def _pass_on(self, mine: Waiter[_E]) -> None:
        """Wake the next caller of ``mine``'s batch that still waits (once)."""
        with self._state:
            nxt, mine.after = mine.after, None
            while nxt is not None and nxt.wake is None:  # abandoned: the one after it
                skipped, nxt = nxt, nxt.after
                skipped.after = None
            wake = nxt.wake if nxt is not None else None
        if wake is not None:
            wake.set()

    def _leave(self) -> None:
        """A drainer lets go of the queue: the first queued caller drains next, or nobody."""
        with self._state:
            nxt = next((waiter for waiter in self._queue if waiter.wake is not None), None)
            if nxt is not None:  # (a waiter without an event was abandoned, or never waits)
                nxt.promoted = True
                wake = nxt.wake
            else:  # the next caller to queue drains whatever is left
                self._draining = False
                return
        assert wake is not None
        wake.set()

    def _abandon(self, mine: Waiter[_E]) -> None:
        """A queued caller stops waiting (an interrupt): its events are still committed, but
        it is no link of a wake-up chain any more, and a turn it was handed goes on."""
        with self._state:
            mine.wake = None  # _release leaves it out of the chain
            done, promoted = mine.done, mine.promoted
        if done:
            self._pass_on(mine)
        if promoted:
            self._leave()

    def _join(self, events: Sequence[_E]) -> list[Any]:
        mine: Waiter[_E] = Waiter(events)
        mine.wake = Signal()
        timings = self.timings
        if timings is not None:
            mine.queued_at = time.perf_counter()
        state = self._state
        with state:
            self._queue.append(mine)
            if self._expected and len(self._queue) >= self._expected:
                self._arrived.notify()
            drains = mine.promoted = not self._draining  # (promoted: never a link of a chain)
            self._draining = True
        wake = mine.wake
        assert wake is not None
        while not drains:
            try:
                wake.wait()
            except BaseException:  # interrupted while waiting: nobody may be left waiting on us
                self._abandon(mine)
                raise
            with state:
                done, drains = mine.done, mine.promoted  # promoted: perhaps committed along too
                if not (done or drains):
                    wake.clear()
            if done:
                self._pass_on(mine)
                if not drains:
                    break
        else:
            try:
                with self._lock:
                    self._drain()
            finally:
                self._leave()
        if timings is not None:
            timings.append((mine.queued_at, mine.committed_at, time.perf_counter(), mine.batch))
        return mine.outcome()


def _chain(batch: list[Waiter[Any]]) -> list[Waiter[Any]]:
    """The callers of ``batch`` that ``_release`` wakes, in order: those still waiting on their
    event. A promoted caller (a drainer, perhaps committed in its own first batch) waits on the
    lock instead, so it is no link of the chain, and the gather does not wait for it."""
    return [waiter for waiter in batch if waiter.wake is not None and not waiter.promoted]


def _fail_unanswered(batch: list[Waiter[Any]], exc: BaseException) -> None:
    """``run`` sets every outcome itself; this is for what escaped it (an interrupt): no
    waiter may be released without one."""
    for waiter in batch:
        if waiter.error is None and waiter.result is None:
            waiter.error = exc
