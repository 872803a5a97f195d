"""The contract every upstream provider keeps, through the monitor and a real Gateway, on both
backends, against the real tools (tests/upstream/upstream_tools.py says how each is driven):
Codex through its app server, OpenCode through its ``db`` and ``export`` commands, Pi through
the files its own session code writes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sessionstate.upstream.adoption import Adopter
from sessionstate.upstream.catalog import CatalogEntry
from sessionstate.upstream.monitor import MISSES_BEFORE_DROP, UpstreamMonitor
from sessionstate.upstream.providers import UpstreamProvider

from tests.upstream.monitor_support import MANAGER, World, make_world
from tests.upstream.upstream_tools import DRIVERS


class Upstream:
    """One provider under test: its tool's driver, a Gateway, the adopter and the monitor."""

    def __init__(self, name: str, tmp: Path, db_url: str, window: int | None = None) -> None:
        self.name = name
        self.driver = DRIVERS[name](tmp)
        self.world: World = make_world(tmp, db_url)
        self.provider: UpstreamProvider = self.driver.provider(window)
        self.providers = {name: self.provider}
        self.echoes: list[str] = []
        self.monitor = UpstreamMonitor(self.world.gw, self.providers, recent_user_messages=lambda key: list(self.echoes))

    def adopt(self, thread: str) -> str:
        adoption = Adopter(self.world.gw, self.providers).adopt(CatalogEntry(self.name, thread), watcher=MANAGER)
        assert adoption.primed
        return adoption.session_key

    def human_events(self, key: str) -> list[dict[str, object]]:
        return self.world.events(key, "human_direct_message")

    def close(self) -> None:
        close = getattr(self.provider, "close", None)
        if close is not None:
            close()
        self.driver.close()
        self.world.gw.close()


@pytest.fixture(params=sorted(DRIVERS))
def upstream(request: pytest.FixtureRequest, tmp_path: Path, db_url: str) -> Iterator[Upstream]:
    subject = Upstream(request.param, tmp_path, db_url)
    yield subject
    subject.close()


def test_a_human_turn_upstream_is_one_event_and_one_notice(upstream: Upstream) -> None:
    thread = upstream.driver.new_thread()
    key = upstream.adopt(thread)
    assert upstream.monitor.tick().activities_recorded == 0  # history before adoption is not activity
    upstream.driver.human(thread, "please also update the docs")
    report = upstream.monitor.tick()
    assert (report.checked, report.activities_recorded, report.errors) == (1, 1, 0)
    (event,) = upstream.human_events(key)
    assert event["actorType"] == "human" and event["summary"] == f"human message via {upstream.name}"
    assert len(upstream.world.notices()) == 1
    assert upstream.monitor.tick().activities_recorded == 0
    assert len(upstream.human_events(key)) == 1


def test_several_turns_in_one_interval_are_one_notice(upstream: Upstream) -> None:
    thread = upstream.driver.new_thread()
    key = upstream.adopt(thread)
    upstream.driver.humans(thread, ["first", "second", "third"])
    assert upstream.monitor.tick().activities_recorded == 3
    assert len(upstream.human_events(key)) == 3
    assert len(upstream.world.notices()) == 1


def test_non_human_lines_and_own_echoes_record_nothing(upstream: Upstream) -> None:
    thread = upstream.driver.new_thread()
    key = upstream.adopt(thread)
    upstream.echoes[:] = ["Run the migration on staging"]
    upstream.driver.non_human(thread)
    upstream.driver.human(thread, "run the  migration on STAGING")
    report = upstream.monitor.tick()
    assert (report.checked, report.activities_recorded, report.echoes_suppressed, report.errors) == (1, 0, 1, 0)
    assert upstream.human_events(key) == [] and upstream.world.notices() == []


def test_deletion_is_three_misses_then_one_upstream_missing_and_continuing_relinks(upstream: Upstream) -> None:
    thread = upstream.driver.new_thread()
    key = upstream.adopt(thread)
    upstream.driver.delete(thread)
    for _ in range(MISSES_BEFORE_DROP - 1):
        assert (upstream.monitor.tick().misses, upstream.world.events(key, "upstream_missing")) == (1, [])
    last = upstream.monitor.tick()
    assert (last.misses, last.missing_emitted) == (1, 1)
    assert upstream.monitor.links.get(key, "main") is None
    assert len(upstream.world.events(key, "upstream_missing")) == 1
    assert len(upstream.world.notices()) == 1
    assert upstream.monitor.tick().checked == 0

    other = upstream.driver.new_thread()
    again = Adopter(upstream.world.gw, upstream.providers).continue_session(CatalogEntry(upstream.name, other), key)
    assert again.primed and not again.created
    upstream.driver.human(other, "back again")
    assert upstream.monitor.tick().activities_recorded == 1
    assert [e["summary"] for e in upstream.human_events(key)] == [f"human message via {upstream.name}"]


@pytest.mark.parametrize("name", sorted(DRIVERS))
def test_a_burst_past_the_window_is_flagged_or_read_over_more_checks_never_lost(
    name: str, tmp_path: Path, db_url: str
) -> None:
    subject = Upstream(name, tmp_path, db_url, window=2 if name == "codex" else 600)
    try:
        thread = subject.driver.new_thread()
        key = subject.adopt(thread)
        texts = [f"burst message {i} " + "x" * 200 for i in range(5)]
        subject.driver.humans(thread, texts)
        for _ in range(10):  # until a tick finds nothing new
            if subject.monitor.tick().activities_recorded == 0:
                break
        activities = subject.world.human_activities(key)
        if subject.driver.window_loses:  # Codex: 2 pages of 2 turns seen, one flagged activity for them
            assert list(activities.values()) == [(4, True)]
        else:  # a byte window (Pi) or the whole export (OpenCode): every turn, none flagged
            assert list(activities.values()) == [(1, False)] * len(texts)
        assert len(subject.world.notices()) == 1
    finally:
        subject.close()
