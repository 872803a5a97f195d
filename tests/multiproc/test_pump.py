"""The pump's schedule (R22): waits back off while idle, but none outlasts the next heartbeat.

A feed woken by its server (PostgreSQL) may ask for idle waits longer than the heartbeat; the
pump must still refresh the heartbeat on time, or a live server's lease would run out.

The change pump (services/change_pump.py) besides: one poll's answer and counts, the idle
back-off's cap and its reset after a change, the heartbeat's spacing, the thread it runs in,
stopping it (also from its own thread), what it logs about failed steps, and a real gateway's
pump sweeping another process's commit.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from sessionstate import Gateway, notice_text
from sessionstate.services import change_pump as pump_module
from sessionstate.services.change_pump import ChangePump
from tests.helpers import SEED, T, W, human, populate

HEARTBEAT = 0.3


class SilentFeed:
    """A feed on which nothing ever changes; it records the timeout of every wait."""

    longest_wait = 30.0  # far beyond the heartbeat

    def __init__(self) -> None:
        self.timeouts: list[float] = []
        self._stop = threading.Event()

    def wait(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        self._stop.wait(timeout)
        return False

    def interrupt(self) -> None:
        self._stop.set()

    def lost(self) -> None:
        raise AssertionError("nothing failed: nothing lost")


class ServingSpy:
    def __init__(self) -> None:
        self.heartbeats: list[float] = []

    def heartbeat(self) -> None:
        self.heartbeats.append(time.monotonic())

    def sweep(self, *, sync: bool = True) -> None:
        raise AssertionError("nothing changed: no sweep")


class StoreStub:
    lock = threading.RLock()


class GatewayStub:
    closed = False

    def __init__(self) -> None:
        self.store = StoreStub()
        self.cluster = ServingSpy()  # the pump's view of the gateway's claims (gw.cluster)


@pytest.fixture
def short_heartbeat(monkeypatch):
    monkeypatch.setattr(pump_module, "HEARTBEAT_SECONDS", HEARTBEAT)


def test_an_idle_pump_heartbeats_on_time_however_long_its_feed_would_wait(short_heartbeat):
    gateway, feed = GatewayStub(), SilentFeed()
    pump = ChangePump(gateway, feed)  # type: ignore[arg-type]
    began = time.monotonic()
    pump.start()
    time.sleep(HEARTBEAT * 6.5)
    pump.stop()
    beats = [began] + gateway.cluster.heartbeats
    assert len(beats) >= 6, beats
    gaps = [b - a for a, b in zip(beats, beats[1:])]
    # Each beat falls due HEARTBEAT after the previous one; it is late only by scheduling.
    assert max(gaps) < HEARTBEAT + 0.15, gaps
    assert max(feed.timeouts) <= HEARTBEAT + 1e-6, feed.timeouts


def test_an_idle_pump_backs_off_to_its_feeds_longest_wait(monkeypatch):
    monkeypatch.setattr(pump_module, "HEARTBEAT_SECONDS", 60.0)  # none falls due in the test
    gateway, feed = GatewayStub(), SilentFeed()
    feed.longest_wait = 0.2
    pump = ChangePump(gateway, feed)  # type: ignore[arg-type]
    pump.start()
    time.sleep(1.2)
    pump.stop()
    # 50 ms, doubling, capped at the feed's longest wait; no heartbeat fell due.
    assert feed.timeouts[:4] == pytest.approx([0.05, 0.1, 0.2, 0.2], abs=1e-3)
    assert max(feed.timeouts) == pytest.approx(0.2, abs=1e-6)
    assert gateway.cluster.heartbeats == []


class ChangingFeed(SilentFeed):
    """A feed that reports a change at every wait and records each ``lost``."""

    def __init__(self) -> None:
        super().__init__()
        self.losses = 0

    def wait(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        return not self._stop.wait(0.001)

    def lost(self) -> None:
        self.losses += 1


class FlakyServing(ServingSpy):
    """The first sweep fails (a dead connection, say); the later ones succeed."""

    def __init__(self) -> None:
        super().__init__()
        self.sweeps: list[float] = []

    def sweep(self, *, sync: bool = True) -> None:
        assert not sync, "the pump sweeps what its feed reported, without waiting for it"
        self.sweeps.append(time.monotonic())
        if len(self.sweeps) == 1:
            raise RuntimeError("the main connection is gone")


def test_a_failed_sweep_is_followed_soon_by_a_full_one(monkeypatch):
    """Issue 20: the pump slept a whole idle wait (PostgreSQL: the 5 s heartbeat) after a
    failed sweep, and a failed step did not always make the next sweep a full one."""
    monkeypatch.setattr(pump_module, "HEARTBEAT_SECONDS", 60.0)
    gateway, feed = GatewayStub(), ChangingFeed()
    gateway.cluster = FlakyServing()
    pump = ChangePump(gateway, feed)  # type: ignore[arg-type]
    began = time.monotonic()
    pump.start()
    while len(gateway.cluster.sweeps) < 2 and time.monotonic() - began < 10:
        time.sleep(0.01)
    pump.stop()
    sweeps = gateway.cluster.sweeps
    assert len(sweeps) >= 2 and feed.losses == 1
    # The retry pause, not the feed's 30 s longest wait (a bound with room for a loaded machine).
    assert sweeps[1] - sweeps[0] < pump_module.RETRY_SECONDS + 1.0


BOUND = 10.0  # seconds: a bound for a stuck pump, not a timing assertion


class SweepSpy(ServingSpy):
    """Records each sweep's ``sync``; the sweep numbers in ``failing`` raise."""

    def __init__(self, failing: frozenset[int] = frozenset(), on_sweep=None) -> None:
        super().__init__()
        self.syncs: list[bool] = []
        self._failing = failing
        self._on_sweep = on_sweep

    def sweep(self, *, sync: bool = True) -> None:
        self.syncs.append(bool(sync))
        if self._on_sweep is not None:
            self._on_sweep()
        if len(self.syncs) in self._failing:
            raise RuntimeError("the main connection is gone")


class ScriptedFeed(SilentFeed):
    """Reports a change at the waits numbered in ``changes`` (from 1), at once; else idles."""

    def __init__(self, changes: set[int]) -> None:
        super().__init__()
        self._changes = changes

    def wait(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        if len(self.timeouts) in self._changes:
            return True
        self._stop.wait(timeout)
        return False


class UnwaitingFeed(SilentFeed):
    """Idle, and never blocks: a poll's timeout is recorded, not slept."""

    def wait(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        return False


@pytest.fixture
def no_heartbeat_due(monkeypatch):
    monkeypatch.setattr(pump_module, "HEARTBEAT_SECONDS", 60.0)


def wait_for(condition) -> None:
    deadline = time.monotonic() + BOUND
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)


def test_one_poll_sweeps_only_on_a_change_and_only_while_the_gateway_is_open():
    gateway = GatewayStub()
    gateway.cluster = SweepSpy()
    silent = UnwaitingFeed()
    idle = ChangePump(gateway, silent)  # type: ignore[arg-type]
    assert (idle.polls, idle.changes) == (0, 0)
    assert idle.poll_once() is False
    assert idle.poll_once() is False
    assert silent.timeouts == [0.0, 0.0]  # by default a poll does not wait
    assert (idle.polls, idle.changes) == (2, 0)
    changing = ChangePump(gateway, ChangingFeed())  # type: ignore[arg-type]
    assert changing.poll_once(0.5) is True
    assert changing.poll_once(0.5) is True
    assert (changing.polls, changing.changes) == (2, 2)
    assert gateway.cluster.syncs == [False, False]  # what the feed reported, without waiting
    gateway.closed = True
    assert changing.poll_once(0.5) is True
    assert gateway.cluster.syncs == [False, False]  # a closed gateway is not swept


def test_an_idle_pump_backs_off_to_the_longest_wait_it_was_given(no_heartbeat_due):
    feed = SilentFeed()  # its own longest wait is 30 s
    pump = ChangePump(GatewayStub(), feed, max_interval=0.1)  # type: ignore[arg-type]
    pump.start()
    wait_for(lambda: len(feed.timeouts) >= 4)
    pump.stop()
    assert feed.timeouts[:4] == pytest.approx([0.05, 0.1, 0.1, 0.1], abs=1e-3)


def test_a_change_brings_the_wait_back_to_the_shortest(no_heartbeat_due):
    feed = ScriptedFeed(changes={3})
    gateway = GatewayStub()
    gateway.cluster = SweepSpy()
    pump = ChangePump(gateway, feed)  # type: ignore[arg-type]
    pump.start()
    wait_for(lambda: len(feed.timeouts) >= 5)
    pump.stop()
    assert feed.timeouts[:5] == pytest.approx([0.05, 0.1, 0.2, 0.05, 0.1], abs=1e-3)
    assert gateway.cluster.syncs == [False]


def test_heartbeats_fall_due_one_interval_apart_not_at_every_step(monkeypatch):
    heartbeat = 0.3
    monkeypatch.setattr(pump_module, "HEARTBEAT_SECONDS", heartbeat)
    gateway = GatewayStub()
    pump = ChangePump(gateway, SilentFeed())  # type: ignore[arg-type]
    began = time.monotonic()
    pump.start()
    time.sleep(heartbeat * 3.5)
    pump.stop()
    beats = [began] + gateway.cluster.heartbeats
    gaps = [b - a for a, b in zip(beats, beats[1:])]
    assert 2 <= len(gaps) <= 4, gaps
    assert min(gaps) >= heartbeat - 0.01, gaps


def test_the_pump_runs_in_a_named_daemon_thread_that_stop_joins(no_heartbeat_due):
    before = set(threading.enumerate())
    pump = ChangePump(GatewayStub(), SilentFeed())  # type: ignore[arg-type]
    pump.start()
    try:
        started = [t for t in threading.enumerate() if t not in before]
        # Named for thread dumps; a daemon, so a gateway left open does not keep the interpreter up.
        assert [(t.name, t.daemon) for t in started] == [("sessionstate-pump", True)]
    finally:
        pump.stop()
    assert not started[0].is_alive()  # joined before stop returned


def test_a_pump_never_started_stops_at_once():
    ChangePump(GatewayStub(), SilentFeed()).stop()  # type: ignore[arg-type]


def test_a_pump_stopped_from_its_own_thread_ends_without_a_failed_step(no_heartbeat_due):
    """A wake callback closing its gateway stops the pump from the pump's own thread."""
    feed = ChangingFeed()
    gateway = GatewayStub()
    pump = ChangePump(gateway, feed)  # type: ignore[arg-type]
    gateway.cluster = SweepSpy(on_sweep=pump.stop)
    pump.start()
    wait_for(lambda: gateway.cluster.syncs)
    pump.stop()
    assert gateway.cluster.syncs == [False] and feed.losses == 0


def test_failed_steps_are_logged_once_per_run_and_the_recovery_counts_them(no_heartbeat_due, caplog):
    feed = ChangingFeed()
    gateway = GatewayStub()
    gateway.cluster = SweepSpy(failing=frozenset({1, 2, 4}))
    pump = ChangePump(gateway, feed)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="sessionstate"):
        pump.start()
        wait_for(lambda: len(gateway.cluster.syncs) >= 6)
        pump.stop()
    assert len(gateway.cluster.syncs) >= 6 and feed.losses == 3
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("ERROR", "change pump sweep failed; retrying every 0.25 s"),
        ("WARNING", "change pump: sweeping again after 2 failed attempt(s)"),
        ("ERROR", "change pump sweep failed; retrying every 0.25 s"),
        ("WARNING", "change pump: sweeping again after 1 failed attempt(s)"),
    ]


def test_a_gateway_opened_with_the_pump_sweeps_another_process_commit(tmp_path, caplog):
    url = populate(f"sqlite:///{tmp_path / 'state.db'}")
    with caplog.at_level(logging.WARNING, logger="sessionstate"):
        with Gateway.open(url, serve=[]) as recorder, Gateway.open(url, pump=True) as server:
            human(recorder)
            wait_for(lambda: server.pending_system_events(W))
            assert server.pending_system_events(W) == [notice_text(T, SEED)]
    assert caplog.records == []  # no failed step, nothing lost
