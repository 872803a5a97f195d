"""The change pump (services/change_pump.py) where the run's selection left it unchecked: one
poll's answer and counts, the idle back-off's cap and its reset after a change, the heartbeat's
spacing, the thread it runs in, stopping it (also from its own thread), and what it logs about
failed steps. The stubs are tests/multiproc/test_pump.py's; one test runs a real gateway's pump."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from sessionstate import Gateway, notice_text
from sessionstate.services import change_pump as pump_module
from sessionstate.services.change_pump import ChangePump
from tests.multiproc.test_pump import ChangingFeed, GatewayStub, ServingSpy, SilentFeed
from tests.multiproc.test_serving import SEED, T, W, human, populate

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
