"""The pump's schedule (R22): waits back off while idle, but none outlasts the next heartbeat.

A feed woken by its server (PostgreSQL) may ask for idle waits longer than the heartbeat; the
pump must still refresh the heartbeat on time, or a live server's lease would run out.
"""

from __future__ import annotations

import threading
import time

import pytest

from sessionstate.services import change_pump as pump_module
from sessionstate.services.change_pump import ChangePump

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
