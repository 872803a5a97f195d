"""The hand-over inside group commit (``services/notice/group_commit.py``), on the class alone:
a fake runner stands in for the store, so each test forms its batch deterministically (the
test holds the write turn while the callers queue) and checks who was woken, and when. Also
what only the timing, the counters and the hand-over show: the gathering after a shared batch,
``idle``, the ``timings`` probe, the ``batches`` counter, the hand-over after ``MAX_ROUNDS``
batches, and a lock holder taking the queue along.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from sessionstate.services.notice import group_commit
from sessionstate.services.notice.group_commit import MAX_ROUNDS, GroupCommit, Waiter

WAIT = 30.0  # only a hang reaches it


class Interrupted(BaseException):
    """Stands for KeyboardInterrupt arriving in one caller's wait."""


class Fake:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.batches: list[list[int]] = []
        self.committed: set[int] = set()
        self.group: GroupCommit[int] = GroupCommit(self.lock, lambda: False, self.alone, self.run)

    def alone(self, events: Sequence[int]) -> list[Any]:
        self.batches.append(list(events))
        self.committed.update(events)
        return list(events)

    def run(self, waiters: list[Waiter[int]]) -> None:
        self.batches.append([e for w in waiters for e in w.events])
        for waiter in waiters:
            waiter.result = list(waiter.events)
        self.committed.update(e for w in waiters for e in w.events)  # the "commit"


def _queued_behind_the_turn(fake: Fake, count: int, outcomes: dict[int, Any]) -> list[threading.Thread]:
    def call(i: int) -> None:
        try:
            result = fake.group.submit([i])
            outcomes[i] = ("committed before return", i in fake.committed, result)
        except BaseException as exc:  # the interrupted one
            outcomes[i] = exc

    # daemons: a caller never woken fails its test instead of keeping the run alive
    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for _ in range(int(WAIT * 1000)):
        if fake.group.queued() == count:
            break
        time.sleep(0.001)  # (not a Signal: one test replaces group_commit's)
    assert fake.group.queued() == count
    return threads


def test_one_batch_wakes_every_caller_through_the_chain_after_the_commit():
    fake = Fake()
    outcomes: dict[int, Any] = {}
    with fake.lock:
        threads = _queued_behind_the_turn(fake, 6, outcomes)
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive(), "a caller of the batch was never woken"
    assert sorted(fake.batches[0]) == list(range(6)) and len(fake.batches) == 1
    assert outcomes == {i: ("committed before return", True, [i]) for i in range(6)}
    assert fake.group.idle()


def test_a_caller_interrupted_in_its_wait_breaks_no_chain(monkeypatch):
    """The third caller's wait raises: it is left out of (or passes on) the chain, so every
    other caller still returns, with its events committed; nothing is left draining."""
    made: list[group_commit.Signal] = []
    real = group_commit.Signal

    class Raising(real):  # type: ignore[misc, valid-type]
        def wait(self, timeout: float | None = None) -> bool:
            raise Interrupted

    def signal() -> group_commit.Signal:
        made.append(Raising() if len(made) == 2 else real())
        return made[-1]

    fake = Fake()
    outcomes: dict[int, Any] = {}
    monkeypatch.setattr(group_commit, "Signal", signal)
    with fake.lock:
        threads = _queued_behind_the_turn(fake, 5, outcomes)
    monkeypatch.undo()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive(), "a caller behind the interrupted one was never woken"
    interrupted = [i for i, o in outcomes.items() if isinstance(o, Interrupted)]
    assert len(interrupted) == 1
    assert all(outcomes[i] == ("committed before return", True, [i]) for i in outcomes if i not in interrupted)
    assert fake.committed == set(range(5)), "the interrupted caller's events are committed all the same"
    assert fake.group.idle()


def test_one_thread_alone_commits_at_once_and_never_queues():
    fake = Fake()
    assert [fake.group.submit([i])[0] for i in range(3)] == [0, 1, 2]
    assert fake.batches == [[0], [1], [2]] and fake.group.batches == 0 and fake.group.idle()


@pytest.mark.parametrize("gather", [True, False])
def test_free_running_threads_all_return_with_gathering_on_or_off(gather):
    fake = Fake()
    fake.group.gather = gather
    per_thread, count = 200, 8

    def work(base: int) -> None:
        for i in range(per_thread):
            assert fake.group.submit([base + i]) == [base + i]

    threads = [threading.Thread(target=work, args=(t * per_thread,), daemon=True) for t in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()
    assert sorted(e for batch in fake.batches for e in batch) == list(range(per_thread * count))
    assert fake.group.idle()


def test_the_gather_waits_only_for_the_callers_the_batch_woke_not_for_its_drainer():
    """The first caller to queue drains, and its own events are in its first batch; it waits
    on the lock, not on an event, so the batch's release wakes only the others and the gather
    after it must expect only those (it expected the drainer too, which cannot queue while it
    drains: every such gather ran to its timeout)."""
    fake = Fake()
    expected: list[int] = []
    gather = fake.group._gather

    def counting(count: int) -> None:
        expected.append(count)
        gather(count)

    fake.group._gather = counting  # type: ignore[method-assign]
    outcomes: dict[int, Any] = {}
    with fake.lock:
        threads = _queued_behind_the_turn(fake, 4, outcomes)
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()
    assert sorted(fake.batches[0]) == [0, 1, 2, 3]
    assert expected[0] == 3, "the gather counted the drainer among the callers it woke"
    assert fake.group.idle()


def test_a_signal_starts_unset_and_a_wait_on_it_times_out():
    signal = group_commit.Signal()
    assert not signal.is_set()
    assert signal.wait(0.01) is False
    assert not signal.is_set()


def test_a_signal_stays_set_through_waits_and_a_second_set_until_cleared():
    signal = group_commit.Signal()
    signal.set()
    signal.set()  # setting a set signal is no error
    assert signal.is_set()
    assert signal.wait() is True and signal.wait(0.01) is True, "a wait must not unset it"
    signal.clear()
    assert not signal.is_set() and signal.wait(0.01) is False
    signal.clear()  # clearing an unset signal is no error
    assert not signal.is_set()


@pytest.mark.parametrize("timeout", [None, WAIT])
def test_a_signal_set_by_another_thread_wakes_its_waiter_and_only_then(timeout):
    """Without a timeout the wait has no end of its own (a queued caller's wait): still waiting
    past a second, it returns True once another thread sets the signal."""
    signal, outcomes = group_commit.Signal(), []
    thread = threading.Thread(target=lambda: outcomes.append(signal.wait(timeout)), daemon=True)
    thread.start()
    thread.join(1.2)
    assert thread.is_alive() and outcomes == [], "the waiter returned before the signal was set"
    signal.set()
    thread.join(WAIT)
    assert outcomes == [True] and signal.is_set()


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
