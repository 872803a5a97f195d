"""R30: retention applies itself. An embedder that never calls ``prune()`` still keeps the log
within R13's bounds: the gateway prunes when it opens and then at most once an hour of its own
clock (a fake one here), from its timer thread; ``auto_prune=False`` leaves it to the host.
Both backends through ``db_url``; each check has a probe that makes it fail."""

from __future__ import annotations

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
