"""The upstream monitor through the real Gateway on a SQLite file."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path

import pytest

from sessionstate.errors import InvalidArgument, SessionExists
from sessionstate.services.notice.announce import created_line
from sessionstate.upstream.adoption import Adopter
from sessionstate.upstream.catalog import CatalogEntry
from sessionstate.upstream.catalog import LOCAL_HOST as HOST
from sessionstate.upstream.dedupe import activity_key
from sessionstate.upstream.monitor import MISSES_BEFORE_DROP, UpstreamMonitor
from sessionstate.upstream.providers import CheckResult, UpstreamProvider

from tests.upstream.monitor_support import MANAGER, World, make_world

THREAD = "5f0c2a8e-1111-4c2d-9e7f-0a1b2c3d4e5f"
OTHER = "6a1d3b9f-2222-4d3e-8f80-1b2c3d4e5f60"


@pytest.fixture
def world(tmp_path: Path) -> World:
    w = make_world(tmp_path)
    yield w
    w.gw.close()


def test_activity_is_recorded_once_and_the_marker_advances(world: World) -> None:
    b = world.builder(THREAD)
    world.transcript(THREAD, b.summary(), b.user_prompt("before adoption"), b.assistant_text("ok"))
    key = world.adopt_jsonl(THREAD)
    monitor = world.monitor()
    link = monitor.links.get(key, "main")
    assert link is not None and link.primed and link.generation >= 1

    assert monitor.tick().activities_recorded == 0  # pre-adoption history is not activity
    uuid = world.human(THREAD, "please also update the docs")
    call, tool = b.assistant_tool_use("Bash", {"command": "ls"})
    world.write(THREAD, call, b.tool_result(tool, "README.md"), b.compaction(), b.assistant_text("done"))
    first = monitor.tick()
    assert (first.checked, first.activities_recorded, first.errors) == (1, 1, 0)
    marker_after = monitor.links.get(key, "main").marker
    assert marker_after != link.marker
    assert json.loads(marker_after)["off"] == world.builder(THREAD).path_under(world.root).stat().st_size

    assert monitor.tick().activities_recorded == 0
    assert world.dedupe_keys(key) == [activity_key(key, "claude-jsonl", HOST, THREAD, uuid)]
    (event,) = world.events(key, "human_direct_message")
    assert event["actorType"] == "human"
    assert event["summary"] == "human message via claude-jsonl"
    assert event["payload"] == {"provider": "claude-jsonl", "channel": "claude-jsonl", "turns": 1,
                                "burstOverflow": False}
    assert [e["kind"] for e in world.events(key)] == ["created", "adopted", "human_direct_message"]


def test_a_rescan_after_a_marker_reset_records_nothing_twice(world: World) -> None:
    world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    monitor = world.monitor()
    world.human(THREAD, "one")
    monitor.tick()
    # Force a full rescan (as after a replaced file): the dedupe key absorbs the repeat.
    link = monitor.links.get(key, "main")
    with world.gw.store.transaction():
        assert monitor.links.advance(link, None, 0.0)
    assert monitor.tick().activities_recorded == 0
    assert len(world.dedupe_keys(key)) == 1


def test_self_echo_is_suppressed(world: World) -> None:
    world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    world.echoes[:] = ["Run the  migration\non staging", "Café"]
    world.human(THREAD, "  run the migration on STAGING ")
    world.human(THREAD, "Cafe\u0301")  # decomposed: equal after NFC
    human = world.human(THREAD, "this one is really typed by a human")
    report = world.monitor().tick()
    assert (report.echoes_suppressed, report.activities_recorded) == (2, 1)
    assert world.dedupe_keys(key) == [activity_key(key, "claude-jsonl", HOST, THREAD, human)]


def test_three_misses_emit_one_upstream_missing_and_drop_the_link(world: World) -> None:
    path = world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    monitor = world.monitor()
    path.unlink()
    for _ in range(MISSES_BEFORE_DROP - 1):
        report = monitor.tick()
        assert (report.misses, report.missing_emitted) == (1, 0)
    assert monitor.links.get(key, "main").consecutive_misses == MISSES_BEFORE_DROP - 1
    assert world.gw.pending_system_events(MANAGER) == [created_line(key, "main", None)]  # R27's only
    last = monitor.tick()
    assert (last.misses, last.missing_emitted) == (1, 1)
    assert monitor.links.get(key, "main") is None
    (missing,) = world.events(key, "upstream_missing")
    assert missing["actorType"] == "system" and "claude-jsonl" in missing["summary"]
    assert len(world.notices()) == 1  # watchers are notified
    for _ in range(4):  # no link, nothing more
        assert monitor.tick().checked == 0
    assert len(world.events(key, "upstream_missing")) == 1


def test_a_found_check_between_misses_resets_the_count(world: World) -> None:
    path = world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    monitor = world.monitor()
    saved = path.read_bytes()
    path.unlink()
    monitor.tick()
    monitor.tick()
    path.write_bytes(saved)
    world.human(THREAD, "I am back")
    report = monitor.tick()
    assert (report.misses, report.activities_recorded) == (0, 1)
    assert monitor.links.get(key, "main").consecutive_misses == 0
    path.unlink()
    monitor.tick()
    monitor.tick()
    assert monitor.links.get(key, "main") is not None  # 2 misses after the reset: kept
    assert monitor.tick().missing_emitted == 1


@pytest.mark.parametrize("failure", ["error", "broken"])
def test_a_provider_error_is_never_a_miss(world: World, failure: str) -> None:
    path = world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    monitor = world.monitor()
    path.unlink()
    monitor.tick()
    monitor.tick()
    setattr(world.jsonl, failure, True)
    for _ in range(5):
        report = monitor.tick()
        assert (report.errors, report.misses, report.missing_emitted) == (1, 0, 0)
    link = monitor.links.get(key, "main")
    assert link.consecutive_misses == 2  # neither reset nor counted
    setattr(world.jsonl, failure, False)
    assert monitor.tick().missing_emitted == 1


def test_an_unmounted_transcript_root_and_an_offline_node_are_errors(world: World) -> None:
    world.transcript(THREAD)
    jsonl_key = world.adopt_jsonl(THREAD)
    world.node.add_item("n1", role="user", text="old")
    node_key = world.adopter().adopt(CatalogEntry("paired-node", "n1", "node-a"), watcher=MANAGER).session_key
    monitor = world.monitor()
    world.root.rename(world.tmp / "unmounted")
    world.node.available = False
    for _ in range(4):
        report = monitor.tick()
        assert (report.errors, report.misses) == (2, 0)
    assert monitor.links.get(jsonl_key, "main").last_status == "error"
    assert monitor.links.get(node_key, "main").consecutive_misses == 0


def test_continue_after_the_drop_creates_a_new_link(world: World) -> None:
    path = world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    monitor = world.monitor()
    first = monitor.links.get(key, "main").generation
    saved = path.read_bytes()
    path.unlink()
    for _ in range(MISSES_BEFORE_DROP):
        monitor.tick()
    assert monitor.links.get(key, "main") is None
    path.write_bytes(saved)
    world.human(THREAD, "typed while unlinked")  # before the Continue: history, not activity
    entry = CatalogEntry("claude-jsonl", THREAD)
    with pytest.raises(SessionExists):
        world.adopter().adopt(entry)
    again = world.adopter().continue_session(entry, key)
    assert again.generation > first and not again.created and again.primed
    assert monitor.tick().activities_recorded == 0
    uuid = world.human(THREAD, "typed after the Continue")
    assert monitor.tick().activities_recorded == 1
    assert world.dedupe_keys(key) == [activity_key(key, "claude-jsonl", HOST, THREAD, uuid)]
    kinds = [e["kind"] for e in world.events(key)]
    assert kinds == ["created", "adopted", "upstream_missing", "adopted", "human_direct_message"]  # one created
    # The new generation can go missing again and emit its own single upstream_missing.
    path.unlink()
    for _ in range(MISSES_BEFORE_DROP + 2):
        monitor.tick()
    assert len(world.events(key, "upstream_missing")) == 2


def test_a_write_racing_a_continue_does_not_land(world: World) -> None:
    world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    monitor = world.monitor()
    world.human(THREAD, "seen by the racing check")
    entry = CatalogEntry("claude-jsonl", THREAD)
    renewed: list[int] = []
    # The Continue lands while the check is between its provider read and its write.
    world.jsonl.before = lambda: renewed.append(world.adopter().continue_session(entry, key).generation)
    report = monitor.tick()
    assert (report.stale_writes, report.activities_recorded) == (1, 0)
    link = monitor.links.get(key, "main")
    assert link.generation == renewed[0] and link.version == 0  # untouched by the stale write
    assert world.events(key, "human_direct_message") == []
    assert world.notices() == []


def test_a_write_racing_a_replaced_session_does_not_land(world: World) -> None:
    world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    monitor = world.monitor()
    world.human(THREAD, "seen by the racing check")

    def replace_session() -> None:
        world.gw.ops.delete_session(key)
        world.gw.create_session(key)

    world.jsonl.before = replace_session
    report = monitor.tick()
    assert report.stale_writes == 1
    assert monitor.links.get(key, "main") is None  # the delete dropped the link
    assert [e["kind"] for e in world.events(key)] == ["created"]  # the new session's own only


def test_deleting_a_session_drops_its_link_even_on_a_reopened_gateway(world: World) -> None:
    world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    url = world.gw.store.url
    world.gw.close()
    from sessionstate import Gateway

    world.gw = Gateway.open(url)
    assert world.monitor().links.get(key, "main") is not None
    world.gw.ops.delete_session(key)
    assert world.monitor().links.all() == []
    world.gw.create_session(key)  # a new session under the old key has no link
    assert world.monitor().links.get(key, "main") is None


def test_burst_over_the_window_is_flagged_through_the_paired_node(world: World) -> None:
    world.node.add_item("n1", role="user", text="before adoption")
    key = world.adopter().adopt(CatalogEntry("paired-node", "n1", "node-a"), watcher=MANAGER).session_key
    monitor = world.monitor()
    assert monitor.tick().activities_recorded == 0
    world.echoes[:] = ["echo of ours"]
    for i in range(60):
        if i % 20 == 5:
            world.node.add_item("n1", role="user", text=f"human {i}")
        elif i == 50:
            world.node.add_item("n1", role="user", text="Echo of  OURS")
        else:
            world.node.add_item("n1", role="assistant", text=f"tool run {i}")
    report = monitor.tick()
    assert (report.activities_recorded, report.echoes_suppressed) == (1, 1)
    (event,) = world.events(key, "human_direct_message")
    assert event["payload"]["burstOverflow"] is True
    assert event["payload"]["turns"] == 2  # human 25 and human 45 (human 5 scrolled out)
    assert "burst overflowed" in event["summary"]
    assert len(world.notices()) == 1


def test_burst_on_a_paired_thread_adopted_empty_is_flagged(world: World) -> None:
    adoption = world.adopter().adopt(CatalogEntry("paired-node", "n-empty", "node-a"), watcher=MANAGER)
    assert adoption.primed
    monitor = world.monitor()
    assert monitor.links.get(adoption.session_key, "main").marker is not None  # "seen empty"
    for i in range(60):
        world.node.add_item("n-empty", role="user" if i % 2 else "assistant", text=f"item {i}")
    report = monitor.tick()
    assert report.activities_recorded == 1
    (event,) = world.events(adoption.session_key, "human_direct_message")
    assert event["payload"]["burstOverflow"] is True
    assert event["payload"]["turns"] == 25  # 5 of the 30 human items scrolled out of the window
    assert event["summary"] == "25 human messages via paired-node (burst overflowed the window)"
    assert len(world.notices()) == 1


def test_a_sidechain_prompt_records_nothing_and_notifies_nobody(world: World) -> None:
    b = world.builder(THREAD)
    world.transcript(THREAD, b.user_prompt("before adoption"))
    key = world.adopt_jsonl(THREAD)
    monitor = world.monitor()
    world.write(THREAD, b.sidechain_prompt("Find every caller of redirect() in src/"),
                b.assistant_text("Found 3 callers."))
    report = monitor.tick()
    assert (report.checked, report.activities_recorded, report.errors) == (1, 0, 0)
    assert world.events(key, "human_direct_message") == []
    assert world.notices() == []


def test_concurrent_appends_while_the_monitor_ticks(world: World) -> None:
    world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    monitor = world.monitor()
    builder = world.builder(THREAD)
    path = builder.path_under(world.root)
    humans: list[str] = []
    done = threading.Event()

    def writer() -> None:
        for i in range(150):
            line = builder.user_prompt(f"human {i} " + "x" * (i * 37 % 900)) if i % 3 == 0 else builder.assistant_text(f"a{i}")
            if line["type"] == "user":
                humans.append(str(line["uuid"]))
            data = json.dumps(line, separators=(",", ":")).encode() + b"\n"
            cut = len(data) // 2  # two writes: the monitor may see half a line
            with open(path, "ab") as handle:
                handle.write(data[:cut])
                handle.flush()
                time.sleep(0.0005)
                handle.write(data[cut:])
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    ticks = 0
    while not done.is_set():
        monitor.tick()
        ticks += 1
    thread.join()
    monitor.tick()
    keys = world.dedupe_keys(key)
    assert sorted(keys) == sorted(activity_key(key, "claude-jsonl", HOST, THREAD, u) for u in humans)
    assert len(keys) == len(set(keys)) == 50
    assert monitor.totals.activities_recorded == 50 and monitor.totals.errors == 0
    assert ticks > 1


def test_end_to_end_the_manager_gets_exactly_one_notice(world: World) -> None:
    world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    version = world.gw.ops.state_version(key)
    monitor = world.monitor()
    for i in range(5):
        world.human(THREAD, f"turn {i}")
        monitor.tick()
    pending = world.gw.pending_system_events(MANAGER)
    assert pending == [
        created_line(key, "main", None),  # R27: the adoption created it; no notice, no wake
        f'Session "{key}" changed (other actor). Reconcile before acting: '
        f'session_status sessionKey "{key}" changesSince {version}.'
    ]
    assert len(world.gw.drain_system_events(MANAGER)) == 2
    reply = world.gw.call_tool(MANAGER, "session_status", {"sessionKey": key, "changesSince": version})
    events = reply["stateChanges"]["events"]
    assert [e["kind"] for e in events] == ["human_direct_message"] * 5
    assert all(e["actorType"] == "human" for e in events)


def test_failure_isolation_one_raising_provider_and_one_raising_echo_source(world: World) -> None:
    world.transcript(THREAD)
    world.transcript(OTHER)
    a = world.adopt_jsonl(THREAD)
    world.node.add_item("n1", role="user", text="old")
    b = world.adopter().adopt(CatalogEntry("paired-node", "n1", "node-a"), watcher=MANAGER).session_key
    c = world.adopt_jsonl(OTHER)

    def recent(key: str) -> list[str]:
        if key == c:
            raise OSError("transcript store down")
        return []

    monitor = world.monitor(recent_user_messages=recent)
    c_marker = monitor.links.get(c, "main").marker
    world.paired.broken = True
    world.human(THREAD, "for a")
    world.node.add_item("n1", role="user", text="for b")
    world.human(OTHER, "for c")
    report = monitor.tick()
    assert (report.activities_recorded, report.errors) == (1, 2)
    assert len(world.events(a, "human_direct_message")) == 1
    assert world.events(b, "human_direct_message") == world.events(c, "human_direct_message") == []
    world.paired.broken = False
    fixed = monitor.tick()
    assert (fixed.activities_recorded, fixed.errors) == (1, 1)  # b now; c keeps failing, retried
    assert monitor.links.get(c, "main").marker == c_marker  # not advanced past unrecorded turns
    assert monitor.totals.errors == 3


def test_unknown_provider_is_an_error_and_keeps_the_link(world: World) -> None:
    world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    monitor = UpstreamMonitor(world.gw, {})
    assert monitor.tick().errors == 1
    assert monitor.links.get(key, "main") is not None


def test_only_watched_links_are_checked_and_unadopted_entries_stay_outside(world: World) -> None:
    world.transcript(THREAD)
    world.transcript(OTHER)
    key = world.adopt_jsonl(THREAD, watcher=None)
    priming_calls = world.jsonl.calls
    monitor = world.monitor()
    world.human(THREAD, "nobody watches")
    world.human(OTHER, "never adopted")
    assert monitor.tick().checked == 0 and world.jsonl.calls == priming_calls
    world.gw.watch(MANAGER, key)
    assert monitor.tick().activities_recorded == 1
    assert [s.session_key for s in world.gw.store.list_sessions()] == [MANAGER, key]


def test_an_unprimed_link_is_primed_by_the_first_successful_check(world: World) -> None:
    world.transcript(THREAD)
    world.human(THREAD, "history")
    world.jsonl.error = True
    adoption = world.adopter().adopt(CatalogEntry("claude-jsonl", THREAD), watcher=MANAGER)
    assert not adoption.primed
    world.jsonl.error = False
    monitor = world.monitor()
    report = monitor.tick()
    assert (report.primed, report.activities_recorded) == (1, 0)
    world.human(THREAD, "new")
    assert monitor.tick().activities_recorded == 1


def test_a_long_backlog_is_primed_across_ticks(world: World) -> None:
    world.transcript(THREAD)
    for i in range(40):
        world.human(THREAD, f"history {i} " + "y" * 200)
    world.jsonl.inner.scan_cap_bytes = 4096
    adoption = world.adopter().adopt(CatalogEntry("claude-jsonl", THREAD), watcher=MANAGER)
    assert adoption.primed  # 64 rounds of 4 KiB cover it
    monitor = world.monitor(prime_rounds=2)
    # A link whose priming ran out of rounds: force it back to the start, unprimed.
    link = monitor.links.get(adoption.session_key, "main")
    with world.gw.store.transaction():
        monitor.links.advance(link, None, 0.0, primed=False)
    ticks = 0
    while not monitor.links.get(adoption.session_key, "main").primed:
        assert monitor.tick().activities_recorded == 0
        ticks += 1
    assert ticks > 1
    world.human(THREAD, "after")
    assert monitor.tick().activities_recorded == 1


def test_adoption_refuses_a_thread_linked_elsewhere_and_unknown_providers(world: World) -> None:
    world.transcript(THREAD)
    world.adopt_jsonl(THREAD)
    with pytest.raises(InvalidArgument, match="already linked"):
        world.adopt_jsonl(THREAD, session_key="agent:main:second")
    with pytest.raises(InvalidArgument, match="no provider"):
        world.adopter().adopt(CatalogEntry("nope", THREAD))
    assert not world.gw.ops.session_exists("agent:main:second")


def test_asyncio_loop_and_background_thread(world: World) -> None:
    world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    world.human(THREAD, "one")
    monitor = world.monitor(interval=0.01)

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(monitor.run(stop))
        await asyncio.sleep(0.1)
        stop.set()
        await asyncio.wait_for(task, 5)

    asyncio.run(main())
    assert len(world.events(key, "human_direct_message")) == 1
    world.human(THREAD, "two")
    monitor.start_background()
    deadline = time.time() + 5
    while len(world.events(key, "human_direct_message")) < 2 and time.time() < deadline:
        time.sleep(0.01)
    monitor.stop(timeout=5)
    assert len(world.events(key, "human_direct_message")) == 2


def test_failures_are_logged(world: World, caplog: pytest.LogCaptureFixture) -> None:
    world.transcript(THREAD)
    world.adopt_jsonl(THREAD)
    world.jsonl.broken = True
    with caplog.at_level(logging.ERROR, logger="sessionstate.upstream"):
        world.monitor().tick()
    assert any("provider exploded" in r.getMessage() or r.exc_info for r in caplog.records)


class _Missing(UpstreamProvider):
    name = "missing"

    def check(self, thread_id: str, marker: str | None) -> CheckResult:
        return CheckResult.missing(marker, "gone")


def test_a_source_missing_at_adoption_counts_misses_from_the_first_tick(world: World) -> None:
    adoption = Adopter(world.gw, {"gone": _Missing()}).adopt(CatalogEntry("gone", "t1"), watcher=MANAGER)
    assert not adoption.primed
    monitor = UpstreamMonitor(world.gw, {"gone": _Missing()})
    reports = [monitor.tick() for _ in range(MISSES_BEFORE_DROP)]
    assert [r.missing_emitted for r in reports] == [0, 0, 1]


def test_default_echo_source_is_the_gateways_transcript(world: World) -> None:
    """Without an explicit source, a prompt the gateway itself delivered (its transcript) and
    the external tool then shows upstream is an echo, not a human turn."""
    world.transcript(THREAD)
    key = world.adopt_jsonl(THREAD)
    world.gw.transcripts.append_message(key, "user", "Deploy the  branch\nto staging")
    world.human(THREAD, "deploy the branch to STAGING")
    typed = world.human(THREAD, "actually wait")
    report = UpstreamMonitor(world.gw, world.providers).tick()
    assert (report.echoes_suppressed, report.activities_recorded) == (1, 1)
    assert world.dedupe_keys(key) == [activity_key(key, "claude-jsonl", HOST, THREAD, typed)]
