"""Group commit: concurrent ``record_event``/``record_events`` callers share a transaction.

Each test forms a batch deterministically: the main thread holds the gateway's lock (its
write turn) while the recording threads queue, waits until all of them are queued, and only
then lets go, so the first leader finds every one of them queued. A batch of two shares one
transaction as a larger one does. An interrupt (a ``BaseException``) escaping a group commit:
a caller whose events were committed before it keeps its sequence, every caller still
unanswered hears of the interrupt, none is left with no outcome, and a queued caller
interrupted after its batch committed still passes the wake-up on to the callers behind it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from sessionstate import Gateway, InvalidArgument, StorageFull, UnknownSession, notice_text
from sessionstate.services.notice import group_commit
from tests.gateway.helpers import CHILD, EVENT, MANAGER, PEER, WAIT, open_watched_child, run_queued, wait_queued

@pytest.fixture
def wakes() -> list[tuple[str, str]]:
    return []


@pytest.fixture
def gw(db_url, wakes):
    gateway = open_watched_child(db_url, on_wake=lambda w, r: wakes.append((w, r)))
    yield gateway
    gateway.close()


class Outcomes:
    """Each thread's result or exception, by name."""

    def __init__(self) -> None:
        self.results: dict[str, Any] = {}
        self.errors: dict[str, BaseException] = {}
        self.order: list[str] = []  # names in the order the calls returned
        self._lock = threading.Lock()

    def run(self, name: str, call: Callable[[], Any]) -> threading.Thread:
        def body() -> None:
            try:
                result = call()
            except BaseException as exc:  # recorded for the test to look at
                with self._lock:
                    self.errors[name] = exc
                    self.order.append(name)
            else:
                with self._lock:
                    self.results[name] = result
                    self.order.append(name)

        thread = threading.Thread(target=body, name=name, daemon=True)  # a caller never woken fails, not hangs
        thread.start()
        return thread


@contextmanager
def one_batch(gw: Gateway, calls: dict[str, Callable[[], Any]], *, queued: int | None = None) -> Iterator[Outcomes]:
    """Run ``calls`` in threads while holding the write turn until ``queued`` (all) wait."""
    outcomes = Outcomes()
    threads = []
    with gw.locked():
        threads = [outcomes.run(name, call) for name, call in calls.items()]
        wait_queued(gw, len(calls) if queued is None else queued)
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive(), "a caller never returned"
    yield outcomes


def test_concurrent_callers_share_one_transaction(gw):
    before = gw.ops.state_version(CHILD)
    outcomes_box: list[Outcomes] = []
    store = gw.store
    original = store.transaction
    commits: list[int] = []

    @contextmanager
    def counted() -> Iterator[None]:
        outer = not store.in_transaction
        with original():
            yield
            if outer:  # before the COMMIT: no caller may have its result yet
                commits.append(len(outcomes_box[0].order) if outcomes_box else -1)

    store.transaction = counted  # type: ignore[method-assign]
    try:
        calls = {f"t{i}": (lambda: gw.record_event(CHILD, "human_direct_message", **EVENT)) for i in range(6)}
        calls["burst"] = lambda: gw.record_events([dict(session_key=CHILD, kind="goal_changed", **EVENT)] * 3)
        outcomes = Outcomes()
        outcomes_box.append(outcomes)
        threads = []
        with gw.locked():
            threads = [outcomes.run(name, call) for name, call in calls.items()]
            wait_queued(gw, len(calls))
        for thread in threads:
            thread.join(WAIT)
    finally:
        del store.transaction
    assert not outcomes.errors
    assert commits == [0], "seven callers, one transaction, nobody answered before its commit"
    assert gw.ops.diagnostics().group_batches == 1
    singles = [outcomes.results[f"t{i}"] for i in range(6)]
    burst = outcomes.results["burst"]
    assert burst == list(range(burst[0], burst[0] + 3)), "a burst stays together and in order"
    every = sorted(singles + burst)
    assert every == list(range(before + 1, before + 10))
    assert gw.ops.state_version(CHILD) == before + 9
    # One notice for the pair (coalesced), queued once after the commit.
    assert gw.pending_system_events(PEER) == [notice_text(CHILD, before)]


def test_a_caller_whose_session_is_unknown_fails_alone(gw):
    calls = {
        "good1": lambda: gw.record_event(CHILD, "human_direct_message", **EVENT),
        # passes validation; its head bump fails inside the batch's transaction
        "gone_qualified": lambda: gw.record_event("agent:main:subagent:nobody", "goal_changed", **EVENT),
        # its lookup fails before the batch
        "gone_unqualified": lambda: gw.record_event("nobody", "goal_changed", **EVENT),
        "good2": lambda: gw.record_events([dict(session_key=MANAGER, kind="goal_changed", **EVENT)]),
    }
    before = gw.ops.state_version(CHILD)
    with one_batch(gw, calls) as outcomes:
        pass
    assert set(outcomes.errors) == {"gone_qualified", "gone_unqualified"}
    assert all(isinstance(e, UnknownSession) for e in outcomes.errors.values())
    assert outcomes.results["good1"] > before  # PostgreSQL's rolled-back batch used up sequence values
    assert isinstance(outcomes.results["good2"][0], int)
    assert gw.ops.state_version(CHILD) == outcomes.results["good1"]
    assert gw.ops.state_version(MANAGER) == outcomes.results["good2"][0]


def test_bad_input_raises_at_once_without_waiting_for_the_turn(gw):
    """Validation runs before a call joins a batch: it raises while another thread holds the
    write turn, and no caller's batch sees it."""
    outcomes = Outcomes()
    with gw.locked():
        thread = outcomes.run("bad", lambda: gw.record_event(CHILD, "no_such_kind", **EVENT))
        thread.join(WAIT)
        assert not thread.is_alive(), "a bad call waited for the write turn"
        burst = outcomes.run("bad_burst", lambda: gw.record_events(
            [dict(session_key=CHILD, kind="goal_changed", **EVENT), dict(session_key=CHILD, kind="x", **EVENT)]))
        burst.join(WAIT)
        assert not burst.is_alive()
        assert gw.ops.diagnostics().group_queued == 0
    assert isinstance(outcomes.errors["bad"], InvalidArgument)
    assert isinstance(outcomes.errors["bad_burst"], InvalidArgument)


def test_a_storage_failure_fails_exactly_the_callers_of_that_batch(gw, monkeypatch):
    """R15 per caller: every caller of the failed batch gets None; the next batch succeeds."""
    store = gw.store

    def full(*args: Any) -> Any:
        raise StorageFull("disk full (injected)")

    # A lone event appends through append_event, a batch through append_and_read: both fail.
    monkeypatch.setattr(store, "append_event", full)
    monkeypatch.setattr(store, "append_and_read", full)
    calls = {f"t{i}": (lambda: gw.record_event(CHILD, "goal_changed", **EVENT)) for i in range(4)}
    calls["burst"] = lambda: gw.record_events([dict(session_key=MANAGER, kind="goal_changed", **EVENT)] * 2)
    before = gw.ops.state_version(CHILD)
    with one_batch(gw, calls) as failed:
        pass
    assert not failed.errors
    assert failed.results == {"t0": None, "t1": None, "t2": None, "t3": None, "burst": [None, None]}
    assert gw.ops.stats["append_failures"] == 6
    monkeypatch.undo()
    calls = {f"t{i}": (lambda: gw.record_event(CHILD, "goal_changed", **EVENT)) for i in range(3)}
    with one_batch(gw, calls) as later:
        pass
    assert len(set(later.results.values())) == 3 and min(later.results.values()) > before
    assert gw.ops.state_version(CHILD) == max(later.results.values())


@pytest.mark.parametrize("failing", ["append_and_read", "put_pair_cursors"])
def test_a_storage_failure_in_the_batchs_decisions_fails_its_callers_and_changes_nothing(
    gw, wakes, monkeypatch, failing
):
    """R15 and R9 for the batch's one cursor read (it goes with the appends,
    ``append_and_read``) and one cursor write: every caller of the batch gets None, nothing
    is written, queued or woken."""

    def full(*args: Any, **kwargs: Any) -> Any:
        raise StorageFull("disk full (injected)")

    monkeypatch.setattr(gw.store, failing, full)
    before, woken = gw.store.dump(), len(wakes)
    calls = {f"t{i}": (lambda: gw.record_event(CHILD, "goal_changed", **EVENT)) for i in range(3)}
    calls["burst"] = lambda: gw.record_events([dict(session_key=CHILD, kind="human_direct_message", **EVENT)] * 2)
    with one_batch(gw, calls) as failed:
        pass
    assert failed.results == {"t0": None, "t1": None, "t2": None, "burst": [None, None]}
    assert gw.store.dump() == before
    assert gw.pending_system_events(PEER) == [] and len(wakes) == woken
    monkeypatch.undo()
    assert gw.record_events([dict(session_key=CHILD, kind="goal_changed", **EVENT)] * 2)[0] is not None
    assert len(gw.pending_system_events(PEER)) == 1


def test_dedupe_and_self_suppression_inside_one_batch(gw, wakes):
    """Two callers with one dedupe key get one event; the watcher's own event gives it no
    notice (R2), another's does; wakes come after the commit (R9)."""
    gw.watch(MANAGER, CHILD)
    before = gw.ops.state_version(CHILD)
    calls = {
        "d1": lambda: gw.record_event(CHILD, "goal_changed", dedupe_key="once", **EVENT),
        "d2": lambda: gw.record_event(CHILD, "goal_changed", dedupe_key="once", **EVENT),
        "own": lambda: gw.record_event(CHILD, "human_direct_message", actor_type="agent", actor_id=PEER,
                                       summary="mine"),
    }
    with one_batch(gw, calls) as outcomes:
        pass
    assert not outcomes.errors
    assert outcomes.results["d1"] == outcomes.results["d2"]
    assert gw.ops.state_version(CHILD) == before + 2
    assert gw.ops.diagnostics().group_batches == 1
    # MANAGER saw no event of its own: one coalesced notice from the first.
    assert gw.pending_system_events(MANAGER) == [notice_text(CHILD, before)]
    assert any(w == MANAGER for w, _ in wakes)


def test_a_caller_inside_its_own_transaction_never_waits_for_a_batch(gw):
    """The holder of the write turn records in its own transaction, even with callers queued
    behind it (waiting for a leader that needs its lock would never end)."""
    outcomes = Outcomes()
    with gw.transaction():
        thread = outcomes.run("queued", lambda: gw.record_event(CHILD, "goal_changed", **EVENT))
        wait_queued(gw, 1)
        mine = gw.record_event(MANAGER, "goal_changed", **EVENT)
        assert gw.ops.diagnostics().group_queued == 1
    thread.join(WAIT)
    assert isinstance(mine, int) and isinstance(outcomes.results["queued"], int)


def test_threads_recording_at_once_lose_nothing(gw):
    """Free-running threads (no forced batch): every sequence distinct, the head at the end,
    per-thread order kept."""
    per_thread = 40
    outcomes = Outcomes()

    def work() -> list[int | None]:
        return [gw.record_event(CHILD, "goal_changed", **EVENT) for _ in range(per_thread)]

    before = gw.ops.state_version(CHILD)
    threads = [outcomes.run(f"t{i}", work) for i in range(6)]
    for thread in threads:
        thread.join(WAIT)
    assert not outcomes.errors
    every = [s for result in outcomes.results.values() for s in result]
    assert all(result == sorted(result) for result in outcomes.results.values())
    assert sorted(every) == list(range(before + 1, before + 1 + 6 * per_thread))
    assert gw.ops.state_version(CHILD) == before + 6 * per_thread


def test_a_lock_holder_outside_a_transaction_commits_the_queue_with_its_own(gw):
    """Holding ``locked()`` (no transaction), a call takes the queued callers along: one
    transaction for all, and the waiting leader finds nothing left to do."""
    outcomes = Outcomes()
    with gw.locked():
        threads = [outcomes.run(f"t{i}", lambda: gw.record_event(CHILD, "goal_changed", **EVENT)) for i in range(3)]
        wait_queued(gw, 3)
        mine = gw.record_event(MANAGER, "goal_changed", **EVENT)
        assert gw.ops.diagnostics().group_queued == 0
    for thread in threads:
        thread.join(WAIT)
    assert not outcomes.errors and isinstance(mine, int)
    assert gw.ops.diagnostics().group_batches == 1
    assert sorted(outcomes.results.values()) == sorted({*outcomes.results.values()})


def test_free_running_callers_lock_holders_and_transactions_together_never_hang(gw):
    """Every entrance at once: plain callers (queued, led, handed the turn), lock holders that
    take the queue along, and callers inside their own transaction; all return, nothing is
    lost."""
    per_thread = 30
    outcomes = Outcomes()

    def plain() -> int:
        for _ in range(per_thread):
            gw.record_event(CHILD, "goal_changed", **EVENT)
        return per_thread

    def burst() -> int:
        for _ in range(per_thread // 3):
            gw.record_events([dict(session_key=CHILD, kind="goal_changed", **EVENT)] * 3)
        return per_thread // 3 * 3

    def holder() -> int:
        for _ in range(per_thread):
            with gw.locked():
                gw.record_event(CHILD, "goal_changed", **EVENT)
        return per_thread

    def nested() -> int:
        for _ in range(per_thread):
            with gw.transaction():
                gw.record_event(CHILD, "goal_changed", **EVENT)
        return per_thread

    before = gw.store.event_count()
    kinds = [plain] * 5 + [burst, holder, nested]
    threads = [outcomes.run(f"{work.__name__}{i}", work) for i, work in enumerate(kinds)]
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive(), "a caller never returned"
    assert not outcomes.errors
    assert gw.store.event_count() - before == sum(outcomes.results.values())
    assert gw.ops.diagnostics().group_idle, "the write turn was left with a leader nobody is"


class Interrupted(BaseException):
    """Stands for KeyboardInterrupt (which pytest would take as its own)."""


def _queue_in_order(gw: Gateway, calls: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Start ``calls`` one by one while the test holds the write turn, each queued before the
    next starts (so the first is the one that drains); returns each call's result or exception."""
    outcomes: dict[str, Any] = {}

    def body(name: str, call: Callable[[], Any]) -> None:
        try:
            outcomes[name] = call()
        except BaseException as exc:  # the test looks at it
            outcomes[name] = exc

    threads = []
    with gw.locked():
        for name, call in calls.items():
            # daemon: a caller never woken must not keep the test run from ending
            threads.append(threading.Thread(target=body, args=(name, call), name=name, daemon=True))
            threads[-1].start()
            wait_queued(gw, len(threads))
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive(), f"{thread.name}: a caller never returned"
    return outcomes


def test_an_interrupt_in_a_group_commit_answers_every_caller_by_what_was_committed(gw, monkeypatch):
    """The batch rolls back on an unknown session, and its callers run again one transaction
    each; an interrupt in the fourth caller's own append leaves the callers before it with their
    committed sequences, and it and the caller after it (never run) with the interrupt."""
    real_append = gw.store.append_event

    def append_or_interrupt(*row: Any) -> Any:
        if row[6] == "interrupted here":  # the summary
            raise Interrupted
        return real_append(*row)

    monkeypatch.setattr(gw.store, "append_event", append_or_interrupt)
    real_alone = gw.store.record_alone

    def alone_or_interrupt(row: Any) -> Any:  # a caller run again alone (PostgreSQL: one round trip)
        if row[6] == "interrupted here":
            raise Interrupted
        return real_alone(row)

    monkeypatch.setattr(gw.store, "record_alone", alone_or_interrupt)
    before = gw.ops.state_version(CHILD)

    def record(summary: str, key: str = CHILD) -> Callable[[], Any]:
        return lambda: gw.record_event(key, "goal_changed", actor_type="human", summary=summary)

    outcomes = _queue_in_order(gw, {
        "drainer": record("first"),
        "answered": record("second"),
        "unknown": record("no such session", "agent:main:subagent:nobody"),
        "interrupted": record("interrupted here"),
        "after": record("never run"),
    })
    assert isinstance(outcomes["unknown"], UnknownSession)
    assert isinstance(outcomes["interrupted"], Interrupted)
    assert isinstance(outcomes["after"], Interrupted), "an unanswered caller hears of the interrupt"
    # The interrupt surfaces in the thread that was committing (the drainer), whose own event
    # was committed before it.
    assert isinstance(outcomes["drainer"], Interrupted)
    answered = outcomes["answered"]
    assert isinstance(answered, int) and answered > before, "a committed caller keeps its sequence"
    assert gw.ops.state_version(CHILD) == answered
    summaries = [c["summary"] for c in gw.session_status(CHILD, changes_since=before)["stateChanges"]["events"]]
    assert summaries == ["first", "second"]
    assert gw.ops.diagnostics().group_idle


def test_a_caller_interrupted_after_its_batch_committed_still_wakes_the_callers_behind_it(gw, monkeypatch):
    """Queued callers are woken as a chain, each by the one before; the third caller's wait is
    interrupted right after its wake-up, and the fourth must be woken all the same."""
    real_signal = group_commit.Signal
    made: list[group_commit.Signal] = []

    class InterruptedOnceWoken(real_signal):  # type: ignore[misc, valid-type]
        def wait(self, timeout: float | None = None) -> bool:
            super().wait(timeout)
            raise Interrupted

    def signal() -> group_commit.Signal:
        """The callers' wake-ups, the third one (the third caller's) interrupted."""
        made.append(InterruptedOnceWoken() if len(made) == 2 else real_signal())
        return made[-1]

    monkeypatch.setattr(group_commit, "Signal", signal)
    before = gw.ops.state_version(CHILD)
    outcomes = _queue_in_order(gw, {
        name: (lambda name=name: gw.record_event(CHILD, "goal_changed", actor_type="human", summary=name))
        for name in ("drainer", "second", "interrupted", "fourth")
    })
    assert isinstance(outcomes["interrupted"], Interrupted)
    assert sorted(outcomes[n] for n in ("drainer", "second", "fourth")) == [before + 1, before + 2, before + 4]
    # The interrupt came after the commit: its event is in the log with the others.
    summaries = [c["summary"] for c in gw.session_status(CHILD, changes_since=before)["stateChanges"]["events"]]
    assert summaries == ["drainer", "second", "interrupted", "fourth"]
    assert gw.ops.diagnostics().group_idle


def test_two_concurrent_callers_share_one_transaction(gw, monkeypatch):
    """R9's group commit holds for a batch of two as for a larger one: one transaction."""
    store = gw.store
    original = store.transaction
    outermost: list[int] = []

    @contextmanager
    def counted() -> Iterator[None]:
        if not store.in_transaction:
            outermost.append(1)
        with original():
            yield

    before = gw.ops.state_version(CHILD)
    monkeypatch.setattr(store, "transaction", counted)
    first, second = run_queued(gw, [lambda: gw.record_event(CHILD, "goal_changed", **EVENT)] * 2)
    monkeypatch.undo()
    assert sorted([first, second]) == [before + 1, before + 2]
    assert len(outermost) == 1, "two callers of one batch committed in separate transactions"
    assert gw.ops.diagnostics().group_batches == 1
