"""The hand-over inside group commit (``services/notice/group_commit.py``), on the class alone:
a fake runner stands in for the store, so each test forms its batch deterministically (the
test holds the write turn while the callers queue) and checks who was woken, and when.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from sessionstate.services.notice import group_commit
from sessionstate.services.notice.group_commit import GroupCommit, Waiter

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
