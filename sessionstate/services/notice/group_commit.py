"""Group commit: concurrent recorders on one store share a transaction.

A recorder that finds the store's write turn free (nobody holds ``store.lock`` and nobody is
queued) commits alone, at once: one thread pays nothing for this module. A recorder that
finds it taken queues its already validated events and waits. Of the waiters, one at a time
leads: it takes the write turn (``store.lock``) and, once it holds it, every batch queued
by then, and hands them to ``run`` in one call, which commits them in one transaction and
gives each its own outcome. Only then is any waiter released, so no caller learns a
sequence before the commit that holds its event.

A thread that already holds the lock (inside ``Gateway.transaction()`` or ``locked()``)
never queues: waiting for a leader that needs the lock this thread holds would never end.
Inside a transaction it records in that transaction; holding the lock outside one,
it commits whatever is queued together with its own events.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

_E = TypeVar("_E")


class Waiter(Generic[_E]):
    """One caller's events in the queue and, once its batch committed, its outcome."""

    __slots__ = ("events", "result", "error", "done", "wake", "promoted")

    def __init__(self, events: Sequence[_E], wake: threading.Event | None = None) -> None:
        self.events = events
        self.result: list[Any] | None = None
        self.error: BaseException | None = None
        self.done = False
        self.wake = wake  # set when done, or when handed the turn; only a queued caller has one
        self.promoted = False  # the previous leader handed this caller the write turn

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
        self._leading = False  # a waiter is taking, or holds, the write turn for the queue
        self.batches = 0  # batches of more than one caller committed (tests and benchmarks)

    def submit(self, events: Sequence[_E]) -> list[Any]:
        """Commit ``events`` (validated already) and return ``run``'s result for them."""
        lock = self._lock
        if not lock.acquire(False):  # another thread holds the turn (an RLock: never this one)
            return self._join(events)
        try:
            # The queue is read without the condition's lock: a stale answer only commits
            # this call alone just before, or together with, a group that is forming.
            if not (self._leading or self._queue) or self._in_transaction():
                return self._run_alone(events)
            # A group formed while the turn was free and its leader is about to take it:
            # commit it from here (its leader then finds nothing left to do).
            return self._lead_here(events)
        finally:
            lock.release()

    def submit_all(self, calls: Sequence[Sequence[_E]]) -> list[Waiter[_E]]:
        """Commit several callers' events as one group, with whatever is queued, waiting for
        the write turn (never from a thread inside its own transaction); returns a waiter per
        call holding its outcome."""
        waiters = [Waiter(events) for events in calls]
        with self._lock:
            self._commit_with_queued(waiters)
        return waiters

    def idle(self) -> bool:
        """Nobody queued and nobody leading (tests check no turn was left held)."""
        with self._state:
            return not self._queue and not self._leading

    def queued(self) -> int:
        """How many callers wait for a leader's commit right now (tests synchronise on it)."""
        with self._state:
            return len(self._queue)

    def _lead_here(self, events: Sequence[_E]) -> list[Any]:
        mine: Waiter[_E] = Waiter(events)
        self._commit_with_queued([mine])
        return mine.outcome()

    def _commit_with_queued(self, waiters: list[Waiter[_E]]) -> None:
        """Holding the write turn: commit ``waiters`` with every caller queued behind it, as
        one group; a failure answers whoever is still unanswered."""
        with self._state:
            batch, self._queue = self._queue + waiters, []
        try:
            self._run(batch)
        except BaseException as exc:
            _fail_unanswered(batch, exc)
            raise
        finally:
            self._release(batch, leader=False)

    def _release(self, batch: list[Waiter[_E]], *, leader: bool) -> None:
        """Mark ``batch`` done and wake exactly its waiters; a leader also hands the turn to
        the first caller queued meanwhile (woken alone: the others sleep on)."""
        with self._state:
            for waiter in batch:
                waiter.done = True
            if len(batch) > 1:
                self.batches += 1
            if leader:
                self._hand_over()
        for waiter in batch:
            if waiter.wake is not None:
                waiter.wake.set()

    def _hand_over(self) -> None:
        """With ``_state`` held: the next queued caller leads, or nobody does."""
        if self._queue:
            nxt = self._queue[0]
            nxt.promoted = True
            assert nxt.wake is not None  # only _join queues, and it gives every waiter one
            nxt.wake.set()
        else:
            self._leading = False

    def _join(self, events: Sequence[_E]) -> list[Any]:
        mine: Waiter[_E] = Waiter(events, threading.Event())
        state = self._state
        with state:
            self._queue.append(mine)
            leading = not self._leading
            self._leading = True
        while not leading:
            assert mine.wake is not None
            mine.wake.wait()
            with state:
                if mine.promoted and mine.done:  # handed the turn, but a lock holder took us along
                    self._hand_over()
                if mine.done:
                    return mine.outcome()
                leading = mine.promoted
                mine.wake.clear()
        batch: list[Waiter[_E]] = []
        try:
            with self._lock:
                with state:  # everything queued while the turn was being taken
                    batch, self._queue = self._queue, []
                if batch:  # empty when a holder of the lock committed it meanwhile
                    self._run(batch)
        except BaseException as exc:
            _fail_unanswered(batch, exc)
            raise
        finally:
            self._release(batch, leader=True)
        return mine.outcome()


def _fail_unanswered(batch: list[Waiter[Any]], exc: BaseException) -> None:
    """``run`` sets every outcome itself; this is for what escaped it (an interrupt): no
    waiter may be released without one."""
    for waiter in batch:
        if waiter.error is None and waiter.result is None:
            waiter.error = exc
