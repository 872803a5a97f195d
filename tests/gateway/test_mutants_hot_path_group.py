"""Group commit's promises that only its timing, counters and hand-over show, on the class
alone (``services/notice/group_commit.py``): the gathering after a shared batch, ``idle``,
the ``timings`` probe, the ``batches`` counter, the hand-over after ``MAX_ROUNDS`` batches and
a lock holder taking the queue along. Written for mutants of the mutmut run that survived
(docs/mutants/services-notice-hot-path.md); the fake store is test_group_commit_handover's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sessionstate.services.notice import group_commit
from sessionstate.services.notice.group_commit import MAX_ROUNDS, Waiter
from tests.gateway.test_group_commit_handover import WAIT, Fake

GATHERING_LONG = 10.0  # a gather left to its timeout would keep the callers this long
PROMPT = GATHERING_LONG / 2  # a gather that ends when the callers queued is back long before


class HookedFake(Fake):
    """The fake store, calling ``during_batch`` while it commits each shared batch."""

    def __init__(self, during_batch: Callable[[HookedFake], None] = lambda fake: None) -> None:
        super().__init__()
        self.during_batch = during_batch
        self.committers: list[str] = []  # the thread that committed each shared batch

    def run(self, waiters: list[Waiter[int]]) -> None:
        self.committers.append(threading.current_thread().name)
        self.during_batch(self)
        super().run(waiters)


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.001)


def start_callers(fake: Fake, events: list[int], outcomes: dict[int, Any]) -> list[threading.Thread]:
    """One thread per event, each submitting it once; ``outcomes`` gets its result or error."""

    def call(event: int) -> None:
        try:
            outcomes[event] = fake.group.submit([event])
        except BaseException as exc:  # looked at by the test
            outcomes[event] = exc

    # daemon: a caller never woken must not keep the test run from ending
    threads = [threading.Thread(target=call, args=(event,), name=f"c{event}", daemon=True) for event in events]
    for thread in threads:
        thread.start()
    return threads


def queue_behind_the_turn(fake: Fake, events: list[int], outcomes: dict[int, Any]) -> list[threading.Thread]:
    """Hold the write turn until every caller queued: the first of them drains them all as one batch."""
    with fake.lock:
        threads = start_callers(fake, events, outcomes)
        wait_until(lambda: fake.group.queued() == len(events), "the callers never queued")
    return threads


def join_all(threads: list[threading.Thread], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        assert not thread.is_alive(), f"{thread.name} did not return in {timeout} s"


def four_callers_in_queue_order(fake: Fake, after: Callable[[int], None]) -> dict[int, Any]:
    """Callers of events 0-3 queued one at a time behind the test's turn (so in the order D, P,
    X, N), each calling ``after`` with its event once it returns or raises; their outcomes."""
    outcomes: dict[int, Any] = {}

    def call(event: int) -> None:
        try:
            outcomes[event] = fake.group.submit([event])
        except BaseException as exc:  # looked at by the test
            outcomes[event] = exc
        after(event)

    threads = []
    with fake.lock:
        for event in range(4):
            threads.append(threading.Thread(target=call, args=(event,), name=f"c{event}", daemon=True))
            threads[-1].start()
            wait_until(lambda: fake.group.queued() == event + 1, "a caller never queued")
    join_all(threads)
    return outcomes


def test_a_drainer_stops_gathering_as_soon_as_the_callers_it_woke_queued_again(monkeypatch):
    """After a shared batch the drainer waits (GATHER_SECONDS at most) for the callers it just
    woke to queue their next events, and commits those together; the wait ends when they have
    queued, not at its timeout. The timeout is made long here so that the difference shows."""
    gathering = threading.Event()

    class SeenGathering(threading.Condition):
        def wait_for(self, predicate: Callable[[], Any], timeout: float | None = None) -> Any:
            gathering.set()
            return super().wait_for(predicate, timeout)

    class Module:  # group_commit's ``threading`` with its Condition watched
        Condition = SeenGathering

        def __getattr__(self, name: str) -> Any:
            return getattr(threading, name)

    monkeypatch.setattr(group_commit, "GATHER_SECONDS", GATHERING_LONG)
    monkeypatch.setattr(group_commit, "threading", Module())
    fake = Fake()
    monkeypatch.setattr(group_commit, "threading", threading)
    outcomes: dict[int, Any] = {}

    def second_caller() -> None:
        outcomes[1] = fake.group.submit([1])
        assert gathering.wait(WAIT), "no gathering after the shared batch"
        fake.group.gather = False  # the batch these events make needs no gathering after it
        outcomes[2] = fake.group.submit([2])

    with fake.lock:
        threads = start_callers(fake, [0], outcomes)
        wait_until(lambda: fake.group.queued() == 1, "the first caller never queued")
        threads.append(threading.Thread(target=second_caller, name="c1", daemon=True))
        threads[-1].start()
        wait_until(lambda: fake.group.queued() == 2, "the second caller never queued")
    started = time.monotonic()
    assert gathering.wait(WAIT), "the drainer did not gather after a batch of two queued callers"
    threads += start_callers(fake, [3], outcomes)
    join_all(threads, PROMPT)
    assert time.monotonic() - started < PROMPT
    assert outcomes == {0: [0], 1: [1], 2: [2], 3: [3]}
    assert fake.batches[0] == [0, 1] and sorted(e for batch in fake.batches[1:] for e in batch) == [2, 3]
    assert fake.group.idle()


def test_idle_is_false_while_a_drainer_commits_the_queue():
    """``idle`` (tests check no turn was left held) means nobody queued *and* nobody draining:
    while the drainer commits, the queue is empty but the turn is taken."""
    seen: list[bool] = []
    fake = HookedFake(lambda fake: seen.append(fake.group.idle()))
    outcomes: dict[int, Any] = {}
    join_all(queue_behind_the_turn(fake, [0, 1], outcomes))
    assert seen == [False]
    assert outcomes == {0: [0], 1: [1]} and fake.group.idle()


def test_the_timings_probe_logs_each_queued_call_in_time_order_with_its_batch_size():
    """``timings`` (the handover benchmark's probe): one entry per queued call, (queued at,
    committed at, woken at, batch size) in perf_counter seconds, in that order in time."""
    fake = Fake()
    fake.group.timings = []
    outcomes: dict[int, Any] = {}
    before = time.perf_counter()
    join_all(queue_behind_the_turn(fake, [0, 1, 2], outcomes))
    after = time.perf_counter()
    assert len(fake.group.timings) == 3
    for queued_at, committed_at, woken_at, size in fake.group.timings:
        assert before <= queued_at <= committed_at <= woken_at <= after
        assert size == 3


def test_batches_counts_the_batches_of_more_than_one_caller():
    fake = Fake()
    outcomes: dict[int, Any] = {}
    join_all(queue_behind_the_turn(fake, [0], outcomes))
    assert fake.batches == [[0]] and fake.group.batches == 0, "a queued caller committed alone is no shared batch"
    join_all(queue_behind_the_turn(fake, [1, 2], outcomes))
    assert fake.group.batches == 1
    join_all(queue_behind_the_turn(fake, [3, 4], outcomes))
    assert fake.group.batches == 2
    assert outcomes == {i: [i] for i in range(5)}


def test_a_drainer_hands_the_turn_to_the_first_queued_caller_after_max_rounds_batches():
    """Each batch brings one new caller into the queue while it commits: the first drainer
    commits MAX_ROUNDS batches and leaves (its own caller is not kept); the caller queued
    then is handed the turn and drains the rest."""
    total = MAX_ROUNDS + 8
    outcomes: dict[int, Any] = {}
    threads: list[threading.Thread] = []

    def one_more_caller(fake: HookedFake) -> None:
        if len(fake.committers) < total:
            threads.extend(start_callers(fake, [len(fake.committers)], outcomes))
            wait_until(lambda: fake.group.queued() == 1, "the new caller never queued")

    fake = HookedFake(one_more_caller)
    threads += queue_behind_the_turn(fake, [0], outcomes)
    wait_until(lambda: len(fake.committers) == total, "the batches stopped before the last caller")
    join_all(list(threads))
    assert fake.committers == ["c0"] * MAX_ROUNDS + [f"c{MAX_ROUNDS}"] * 8
    assert outcomes == {i: [i] for i in range(total)} and fake.group.idle()


def test_a_lock_holder_commits_the_queued_callers_with_its_own_events_in_one_batch():
    fake = Fake()
    outcomes: dict[int, Any] = {}
    with fake.lock:
        threads = start_callers(fake, [0, 1], outcomes)
        wait_until(lambda: fake.group.queued() == 2, "the callers never queued")
        assert fake.group.submit([9]) == [9]
        assert fake.group.queued() == 0
    join_all(threads)
    assert len(fake.batches) == 1 and sorted(fake.batches[0]) == [0, 1, 9] and fake.batches[0][-1] == 9
    assert outcomes == {0: [0], 1: [1]} and fake.group.batches == 1



class Interrupted(BaseException):
    """Stands for KeyboardInterrupt arriving in one caller's wait."""


def test_a_caller_that_finds_the_next_one_gone_skips_it_and_wakes_nobody_twice(monkeypatch):
    """Chain P -> X -> N: X is interrupted after the commit and, leaving, wakes N itself; when
    P then passes the turn on it finds X gone, skips it, and returns its own result."""
    real_event, real_signal = threading.Event, group_commit.Signal
    made: list[group_commit.Signal] = []
    x_left = real_event()

    class SlowToWake(real_signal):  # type: ignore[misc, valid-type]
        """P's wake-up: it goes on only once X has left."""

        def wait(self, timeout: float | None = None) -> bool:
            woken = super().wait(timeout)
            assert x_left.wait(WAIT), "X never left"
            return woken

    class InterruptedAfterTheCommit(real_signal):  # type: ignore[misc, valid-type]
        """X's wait: interrupted once its batch committed (P, first of the chain, was woken)."""

        def wait(self, timeout: float | None = None) -> bool:
            assert real_signal.wait(made[1], WAIT), "the batch was never committed"
            raise Interrupted

    kinds = [real_signal, SlowToWake, InterruptedAfterTheCommit, real_signal]  # D, P, X, N in queue order

    def signal() -> group_commit.Signal:  # the callers' wake-ups, in queue order
        made.append(kinds[len(made)]())
        return made[-1]

    monkeypatch.setattr(group_commit, "Signal", signal)
    fake = Fake()
    outcomes = four_callers_in_queue_order(fake, lambda event: x_left.set() if event == 2 else None)
    monkeypatch.undo()
    assert isinstance(outcomes.pop(2), Interrupted)
    assert outcomes == {0: [0], 1: [1], 3: [3]}
    assert fake.batches == [[0, 1, 2, 3]] and fake.group.idle()


def test_a_caller_interrupted_while_the_one_before_it_passes_the_turn_on_still_raises_its_interrupt(monkeypatch):
    """Chain P -> X -> N, the other order: X is interrupted after the commit and has left the
    chain, but before it passes the turn on itself, P passes it on (skipping X, waking N).
    X then has nobody left to wake: it raises its own interrupt, and N is woken once."""
    real_event, real_lock, real_signal = threading.Event, threading.Lock, group_commit.Signal
    made: list[group_commit.Signal] = []
    x_interrupted, x_out_of_the_chain, p_returned = real_event(), real_event(), real_event()

    class SlowToWake(real_signal):  # type: ignore[misc, valid-type]
        """P's wake-up: it goes on only once X is out of the chain."""

        def wait(self, timeout: float | None = None) -> bool:
            woken = super().wait(timeout)
            assert x_out_of_the_chain.wait(WAIT), "X never left the chain"
            return woken

    class InterruptedAfterTheCommit(real_signal):  # type: ignore[misc, valid-type]
        def wait(self, timeout: float | None = None) -> bool:
            assert real_signal.wait(made[1], WAIT), "the batch was never committed"
            x_interrupted.set()
            raise Interrupted

    class PausingX:
        """The group's state lock: X, leaving, pauses after its first hold (out of the chain)
        until P has passed the turn on and returned."""

        def __init__(self) -> None:
            self._lock = real_lock()

        def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
            return self._lock.acquire(blocking, timeout)

        def release(self) -> None:
            self._lock.release()
            if threading.current_thread().name == "c2" and x_interrupted.is_set() and not x_out_of_the_chain.is_set():
                x_out_of_the_chain.set()
                assert p_returned.wait(WAIT), "P never returned"

        __enter__ = acquire

        def __exit__(self, *exc: object) -> None:
            self.release()

    kinds = [real_signal, SlowToWake, InterruptedAfterTheCommit, real_signal]  # D, P, X, N in queue order

    def signal() -> group_commit.Signal:  # the callers' wake-ups, in queue order
        made.append(kinds[len(made)]())
        return made[-1]

    class Module:  # group_commit's ``threading`` with the state lock replaced
        Lock = PausingX

        def __getattr__(self, name: str) -> Any:
            return getattr(threading, name)

    monkeypatch.setattr(group_commit, "Signal", signal)
    monkeypatch.setattr(group_commit, "threading", Module())
    fake = Fake()
    outcomes = four_callers_in_queue_order(fake, lambda event: p_returned.set() if event == 1 else None)
    monkeypatch.undo()
    assert type(outcomes.pop(2)) is Interrupted
    assert outcomes == {0: [0], 1: [1], 3: [3]}
    assert fake.batches == [[0, 1, 2, 3]] and fake.group.idle()
