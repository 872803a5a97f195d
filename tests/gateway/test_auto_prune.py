"""R30: retention applies itself. An embedder that never calls ``prune()`` still keeps the log
within R13's bounds: the gateway prunes when it opens and then at most once an hour of its own
clock (a fake one here), from its timer thread; ``auto_prune=False`` leaves it to the host.
Both backends through ``db_url``; each check has a probe that makes it fail. The schedule alone
(``AutoPrune``): what it counts and logs, its timer thread's name, and how that thread waits for
the due time (by the clock, without a poke, and again after a run that raised)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator

import anyio
import pytest

from sessionstate import Gateway
from sessionstate.aio import AsyncGateway
from sessionstate.services.retention import AUTO_PRUNE_INTERVAL, AutoPrune

MANAGER = "agent:main:main"
CHILD = "agent:main:subagent:child"
DAY = 86_400.0
HOUR = 3_600.0
NOW = 1_800_000_000.0
WINDOW = 30 * DAY  # R13's default retention window
QUIET = {"record_created": False, "notify_on_create": False}
THREAD_BOUND_SECONDS = 30.0  # a loaded 2-core machine: the timer thread's answer, generously


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def human(gw: Gateway) -> int:
    seq = gw.record_event(CHILD, "human_direct_message", actor_type="human", summary="hello")
    assert seq is not None
    return seq


class Seeded:
    """What ``seed`` left: CHILD's event sequences, every event row, MANAGER's owed notice."""

    def __init__(self, sequences: list[int], rows: int, owed: list[str]) -> None:
        self.sequences, self.rows, self.owed = sequences, rows, owed


def seed(db_url: str, clock: Clock, events: int = 3) -> Seeded:
    """A host that never prunes records ``events`` events at the clock's time and stops."""
    with Gateway.open(db_url, clock=clock, auto_prune=False, **QUIET) as gw:
        gw.create_session(MANAGER)
        gw.create_session(CHILD, kind="subagent", parent=MANAGER)
        for _ in range(events):
            human(gw)
        sequences = retained(gw)  # the spawn's child_spawned and the human messages
        owed = gw.pending_system_events(MANAGER)
        assert len(owed) == 1  # MANAGER's spawn cursor on CHILD is pending
        return Seeded(sequences, len(gw.store.dump()["session_state_events"]), owed)


def retained(gw: Gateway) -> list[int]:
    """The sequences of CHILD still in the log."""
    return [e["sequence"] for e in gw.session_status(CHILD, changes_since=0)["stateChanges"]["events"]]


def wait_for_runs(schedule: AutoPrune, runs: int) -> None:
    deadline = time.monotonic() + THREAD_BOUND_SECONDS
    schedule.poke()
    while schedule.runs < runs and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.fixture
def no_auto_prune(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The probe's mutation: the schedule is kept but never prunes (R30 disabled in code)."""
    monkeypatch.setattr(AutoPrune, "run_due", lambda self: None)
    yield


# -- at open ------------------------------------------------------------------------------


def check_pruned_at_open(db_url: str, clock: Clock) -> None:
    old = seed(db_url, clock).sequences
    clock.now += WINDOW + HOUR
    with Gateway.open(db_url, clock=clock, **QUIET) as gw:
        status = gw.session_status(CHILD, changes_since=0)
        assert retained(gw) == [], "the events older than the window went at open"
        assert status["stateChanges"]["historyGap"] is True
        assert status["stateVersion"] == old[-1]  # the head stays (R13)
        # The idle pending cursor expired before the startup sweep could re-queue its notice.
        assert gw.ops.cursor_positions(MANAGER, CHILD) is None
        assert gw.pending_system_events(MANAGER) == []


def test_r30_prunes_at_open(db_url, clock):
    check_pruned_at_open(db_url, clock)


def test_r30_at_open_probe_fails_without_auto_prune(db_url, clock, no_auto_prune):
    with pytest.raises(AssertionError, match="went at open"):
        check_pruned_at_open(db_url, clock)


def test_r30_off_prunes_nothing_and_starts_no_timer(db_url, clock):
    """The control of the two above: with ``auto_prune=False`` the same reopening keeps every
    event, and the sweep re-queues the pending pair's notice (R11)."""
    seeded = seed(db_url, clock)
    clock.now += WINDOW + HOUR
    threads = {t for t in threading.enumerate() if t.name == "sessionstate-prune"}
    with Gateway.open(db_url, clock=clock, auto_prune=False, **QUIET) as gw:
        assert gw.ops.auto_prune is None
        assert {t for t in threading.enumerate() if t.name == "sessionstate-prune"} == threads
        clock.now += 3 * HOUR
        assert retained(gw) == seeded.sequences
        assert gw.pending_system_events(MANAGER) == seeded.owed


# -- hourly, by the gateway's clock -------------------------------------------------------


def check_hourly(db_url: str, clock: Clock) -> None:
    old = seed(db_url, clock).sequences
    clock.now += WINDOW - 10 * 60  # opened 10 minutes before the old events leave the window
    with Gateway.open(db_url, clock=clock, **QUIET) as gw:
        schedule = gw.ops.auto_prune
        assert schedule is not None
        assert retained(gw) == old, "nothing was past the window at open"
        opened_at = clock.now
        newer = human(gw)  # recorded by the host, which never calls prune()

        clock.now = opened_at + 30 * 60  # past the window, not an hour since the last run
        assert schedule.run_due() is None
        assert retained(gw) == [*old, newer], "not before an hour of the gateway's clock"

        clock.now = opened_at + AUTO_PRUNE_INTERVAL + 1
        wait_for_runs(schedule, 2)  # the timer thread, not this test, runs the prune
        assert retained(gw) == [newer], "the old events went once the hour had passed"
        assert schedule.last is not None and schedule.last["events"] == len(old)
        assert schedule.failures == 0
        assert schedule.run_due() is None  # and is due again only an hour later


def test_r30_prunes_an_hour_later_not_before(db_url, clock):
    check_hourly(db_url, clock)


def test_r30_hourly_probe_fails_without_the_timer(db_url, clock, monkeypatch):
    """The hourly check fails when no timer thread runs (the run at open untouched): the
    test's own calls never prune once the hour has passed."""
    monkeypatch.setattr(AutoPrune, "start", lambda self: None)
    monkeypatch.setattr(sys.modules[__name__], "THREAD_BOUND_SECONDS", 0.5)
    with pytest.raises(AssertionError, match="once the hour had passed"):
        check_hourly(db_url, clock)


def count_schedule_calls_while_recording(db_url: str, clock: Clock, monkeypatch: pytest.MonkeyPatch,
                                         events: int = 50) -> int:
    """How often recording ``events`` events (one call each, and one burst) touched the schedule."""
    calls: list[str] = []
    real = AutoPrune.run_due
    caller = threading.current_thread()  # the timer thread's own checks are not the record path's

    def counted(self: AutoPrune) -> dict[str, int] | None:
        if threading.current_thread() is caller:
            calls.append("run_due")
        return real(self)

    monkeypatch.setattr(AutoPrune, "run_due", counted)
    with Gateway.open(db_url, clock=clock, **QUIET) as gw:
        gw.create_session(MANAGER)
        gw.create_session(CHILD, kind="subagent", parent=MANAGER)
        at_open = len(calls)
        for _ in range(events):
            human(gw)
            clock.now += 2 * HOUR  # due again at every event: still not the record path's job
        gw.record_events([dict(session_key=CHILD, kind="compacted", actor_type="system", summary="c")] * events)
        return len(calls) - at_open


def test_r30_recording_never_checks_the_schedule(db_url, clock, monkeypatch):
    assert count_schedule_calls_while_recording(db_url, clock, monkeypatch) == 0


def test_r30_the_record_path_check_can_fail(db_url, clock, monkeypatch):
    """The probe: a record path that asked the schedule at each event is seen."""
    real = Gateway.record_event

    def asking(gw: Gateway, *args, **kwargs):  # type: ignore[no-untyped-def]
        if gw.ops.auto_prune is not None:
            gw.ops.auto_prune.run_due()
        return real(gw, *args, **kwargs)

    monkeypatch.setattr(Gateway, "record_event", asking)
    assert count_schedule_calls_while_recording(db_url, clock, monkeypatch) >= 50


# -- several processes, a read-only file, the async open ----------------------------------


def test_r30_gateways_opening_together_delete_each_event_once(db_url, clock):
    """No claim is needed: two gateways pruning at once (each at its open) delete the old
    events between them exactly once, under the watermark R13 writes."""
    seeded = seed(db_url, clock)
    clock.now += WINDOW + HOUR
    gateways: list[Gateway] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def open_one() -> None:
        try:
            start.wait()
            gateways.append(Gateway.open(db_url, clock=clock, **QUIET))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        counts = [gw.ops.auto_prune.last for gw in gateways if gw.ops.auto_prune is not None]
        assert len(counts) == 2 and all(c is not None for c in counts)
        assert sum(c["events"] for c in counts if c is not None) == seeded.rows
        assert retained(gateways[0]) == []
        assert gateways[1].session_status(CHILD, changes_since=0)["stateChanges"]["historyGap"] is True
    finally:
        for gw in gateways:
            gw.close()


def test_r30_a_read_only_database_is_not_pruned(tmp_path, clock):
    path = tmp_path / "state.db"
    old = seed(f"sqlite:///{path}", clock).sequences
    clock.now += WINDOW + HOUR
    with Gateway.open(f"sqlite:///file:{path}?mode=ro&uri=true", clock=clock, **QUIET) as gw:
        schedule = gw.ops.auto_prune
        assert schedule is not None and schedule.runs == 0 and schedule.failures == 0
        clock.now += 2 * HOUR
        assert schedule.run_due() is None and schedule.failures == 0
        assert retained(gw) == old
    with Gateway.open(f"sqlite:///{path}", clock=clock, **QUIET) as gw:  # the control: writable
        assert retained(gw) == []


def test_r30_async_open_passes_auto_prune_through(tmp_path):
    async def schedules() -> list[bool]:
        found = []
        for auto in (True, False):
            async with await AsyncGateway.open(str(tmp_path / f"{auto}.db"), auto_prune=auto) as agw:
                found.append(agw.gateway.ops.auto_prune is not None)
        return found

    assert anyio.run(schedules) == [True, False]


# -- the schedule alone ---------------------------------------------------------------------


def test_r30_a_failed_run_is_counted_not_raised_and_due_again_an_hour_later(clock, caplog):
    outcomes: list[BaseException | dict[str, int]] = [OSError("disk gone"), {"events": 1}]

    def prune() -> dict[str, int]:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    schedule = AutoPrune(prune, clock, read_only=lambda: False)
    assert schedule.run_due() is None  # the run at open failed: logged, counted, not raised
    assert (schedule.runs, schedule.failures) == (0, 1)
    assert "automatic prune failed" in caplog.text
    clock.now += AUTO_PRUNE_INTERVAL - 1
    assert schedule.run_due() is None and outcomes  # not retried before the hour
    clock.now += 1
    assert schedule.run_due() == {"events": 1} and (schedule.runs, schedule.failures) == (1, 1)


class Outcomes:
    """A prune that answers from a script: an exception is raised, counts are returned;
    ``used_up`` is set when the last outcome is taken."""

    def __init__(self, *outcomes: BaseException | dict[str, int]) -> None:
        self.outcomes = list(outcomes)
        self.used_up = threading.Event()

    def __call__(self) -> dict[str, int]:
        outcome = self.outcomes.pop(0)
        if not self.outcomes:
            self.used_up.set()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def test_every_run_and_every_failure_is_counted_and_last_keeps_the_last_success():
    clock = Clock()
    schedule = AutoPrune(Outcomes(OSError("disk gone"), OSError("disk gone"), {"events": 1}, {"events": 2}),
                         clock, read_only=lambda: False)
    assert (schedule.runs, schedule.failures, schedule.last) == (0, 0, None)  # no run yet
    for expected in [(0, 1, None), (0, 2, None), (1, 2, {"events": 1}), (2, 2, {"events": 2})]:
        schedule.run_due()
        assert (schedule.runs, schedule.failures, schedule.last) == expected
        clock.now += AUTO_PRUNE_INTERVAL


def test_a_failed_run_logs_the_failure_and_when_it_runs_again(caplog):
    schedule = AutoPrune(Outcomes(OSError("disk gone")), Clock(), read_only=lambda: False, interval=600.0)
    with caplog.at_level(logging.ERROR, logger="sessionstate"):
        assert schedule.run_due() is None
    (record,) = caplog.records
    assert record.getMessage() == "automatic prune failed; it runs again in 600 s of the gateway's clock"
    assert record.exc_info is not None and isinstance(record.exc_info[1], OSError)


def test_the_timer_thread_is_named_for_the_prune():
    # The name is how an operator, and test_auto_prune's "starts no timer" check, tell it apart.
    def named() -> int:
        return sum(t.name == "sessionstate-prune" for t in threading.enumerate())

    before = named()
    schedule = AutoPrune(Outcomes({"events": 0}), Clock(), read_only=lambda: False)
    schedule.start()
    try:
        assert named() == before + 1
    finally:
        schedule.stop()
    assert named() == before


def test_a_schedule_started_before_any_run_prunes_at_once_from_its_thread():
    prune = Outcomes({"events": 0})
    schedule = AutoPrune(prune, Clock(), read_only=lambda: False, max_sleep=0.05)
    schedule.start()  # no run_due first, no poke: "no due time yet" means due now
    try:
        assert prune.used_up.wait(THREAD_BOUND_SECONDS)
    finally:
        schedule.stop()
    assert schedule.runs == 1


class TimerClock(Clock):
    """The fake clock, counting the reads made by any thread but the test's own (the timer's)."""

    def __init__(self) -> None:
        super().__init__()
        self.test_thread = threading.current_thread()
        self.timer_reads = 0
        self.read = threading.Condition()

    def __call__(self) -> float:
        if threading.current_thread() is not self.test_thread:
            with self.read:
                self.timer_reads += 1
                self.read.notify_all()
        return self.now

    def wait_for_timer_reads(self, count: int) -> bool:
        with self.read:
            return self.read.wait_for(lambda: self.timer_reads >= count, THREAD_BOUND_SECONDS)


def test_the_timer_waits_for_the_due_time_instead_of_asking_the_clock_over_and_over():
    clock = TimerClock()
    schedule = AutoPrune(Outcomes({"events": 0}, {"events": 0}), clock, read_only=lambda: False)  # 60 s between reads
    schedule.run_due()  # the run at open: due again an hour of the fake clock later
    schedule.start()
    try:
        time.sleep(0.3)
    finally:
        schedule.stop()
    assert clock.timer_reads <= 1  # one read, then a sleep of max_sleep (the stop ends it)
    assert schedule.runs == 1


def test_the_timer_notices_the_due_time_by_the_clock_without_a_poke():
    clock = TimerClock()
    prune = Outcomes({"events": 0}, {"events": 0})
    schedule = AutoPrune(prune, clock, read_only=lambda: False, max_sleep=0.05)
    schedule.run_due()
    schedule.start()
    try:
        assert clock.wait_for_timer_reads(1)  # it found the run an hour away, and sleeps
        clock.now += AUTO_PRUNE_INTERVAL  # nobody pokes the timer
        assert prune.used_up.wait(THREAD_BOUND_SECONDS)
    finally:
        schedule.stop()
    assert schedule.runs == 2


def test_a_timer_run_that_raises_is_tried_again_without_a_poke():
    """The schedule's storage failing in the timer's own run (a read-only check that lost its
    PostgreSQL connection): ``max_sleep`` seconds later the timer reads the clock again."""
    clock = TimerClock()
    refused = threading.Event()
    reads_when_refused: list[int] = []

    def read_only() -> bool:
        if not refused.is_set():
            reads_when_refused.append(clock.timer_reads)
            refused.set()
            raise RuntimeError("the connection went away")
        return False

    prune = Outcomes({"events": 0})
    schedule = AutoPrune(prune, clock, read_only=read_only, max_sleep=0.05)
    schedule.start()  # due at once: the timer's first run is the one refused
    try:
        assert refused.wait(THREAD_BOUND_SECONDS)
        assert clock.wait_for_timer_reads(reads_when_refused[0] + 1)  # it came back by itself
        clock.now += AUTO_PRUNE_INTERVAL
        assert prune.used_up.wait(THREAD_BOUND_SECONDS)
    finally:
        schedule.stop()
    assert (schedule.runs, schedule.failures) == (1, 0)  # a raising check is no failed prune
