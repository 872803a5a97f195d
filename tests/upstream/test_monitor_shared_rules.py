"""The monitor's rules every provider shares (spec: upstream section), on both backends: the
dedupe keys' shape, a session key linked under several agents is not checked, and the owning
agent comes from the catalog entry, not from the key."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessionstate.errors import InvalidArgument
from sessionstate.upstream.catalog import CatalogEntry
from sessionstate.upstream.dedupe import source_id

from tests.upstream.monitor_support import MANAGER, World, make_world

THREAD = "5f0c2a8e-1111-4c2d-9e7f-0a1b2c3d4e5f"
OTHER = "6a1d3b9f-2222-4d3e-8f80-1b2c3d4e5f60"


@pytest.fixture
def world(tmp_path: Path, db_url: str) -> Iterator[World]:
    w = make_world(tmp_path, db_url)
    yield w
    w.gw.close()


def test_dedupe_keys_name_the_session_the_source_and_the_activity(world: World) -> None:
    path = world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    monitor = world.monitor()
    turn = world.human(THREAD, "typed upstream")
    monitor.tick()
    source = source_id("claude-jsonl", "local", THREAD)
    assert re.fullmatch(r"[0-9a-f]{16}", source)
    assert world.dedupe_keys(key) == [f"upstream:{key}:{source}:{turn}"]
    generation = monitor.links.get(key, "main").generation
    path.unlink()
    for _ in range(3):
        monitor.tick()
    assert world.dedupe_keys(key, "upstream_missing") == [f"upstream-missing:{key}:{source}:{generation}"]


def test_a_key_linked_under_several_agents_is_not_checked(world: World) -> None:
    world.transcript(THREAD)
    world.transcript(OTHER)
    adopter = world.adopter()
    adopter.adopt(CatalogEntry("claude-jsonl", THREAD), agent_id="main", session_key="shared", watcher=MANAGER)
    adopter.adopt(CatalogEntry("claude-jsonl", OTHER), agent_id="coder", session_key="shared")
    world.gw.watch(MANAGER, "shared", target_agent_id="coder")
    world.human(THREAD, "typed into one")
    world.human(OTHER, "typed into the other")
    monitor = world.monitor()
    report = monitor.tick()
    assert (report.skipped_ambiguous, report.checked, report.activities_recorded) == (2, 0, 0)
    world.gw.ops.delete_session("shared", agent_id="coder")
    after = monitor.tick()
    assert (after.skipped_ambiguous, after.checked, after.activities_recorded) == (0, 1, 1)


def test_the_owning_agent_is_the_one_the_catalog_reports(world: World) -> None:
    world.transcript(THREAD)
    world.transcript(OTHER)
    adopter = world.adopter()
    reported = CatalogEntry("claude-jsonl", THREAD, agent_id="coder")
    adoption = adopter.adopt(reported, session_key="work")  # an unqualified key names no agent
    assert (adoption.session_key, adoption.agent_id) == ("work", "coder")
    with pytest.raises(InvalidArgument):
        adopter.adopt(CatalogEntry("claude-jsonl", OTHER, agent_id="coder"), agent_id="main")
    with pytest.raises(InvalidArgument):
        adopter.adopt(CatalogEntry("claude-jsonl", OTHER, agent_id="coder"), session_key="agent:main:x")
    default = adopter.adopt(CatalogEntry("claude-jsonl", OTHER, agent_id="coder"))
    assert default.session_key == f"agent:coder:adopted:claude-jsonl:{OTHER}"
