"""R24-R26: human turns only for watched sessions; cursor provenance; ambient cursors are
queue-only (their notices are queued and drained like any other, but never wake). Every test
runs on both backends (the ``db_url`` fixture)."""

from __future__ import annotations

import json
import logging

import pytest

from sessionstate import Gateway, InvalidArgument, notice_text
from sessionstate.services.notice.announce import created_line
from tests.gateway.helpers import BEHIND, CAUGHT_UP, WATCHER, human_upstream
from tests.helpers import Clock

MAIN = "agent:main:main"
GROUP = "agent:main:group:lobby"
OTHER = "agent:main:group:other"
CHILD = "agent:main:subagent:c1"
WINDOW = 20.0


def open_gateway(url: str, clock: Clock, wakes: list[tuple[str, str]], **options) -> Gateway:
    return Gateway.open(url, clock=clock, on_wake=lambda w, reason: wakes.append((w, reason)), **options)


def human(gw: Gateway, target: str) -> int:
    sequence = gw.record_event(target, "human_direct_message", actor_type="human", summary="human message")
    assert sequence is not None
    return sequence


# -- R24: human turns for watched sessions only ----------------------------------------------


def test_a_human_turn_into_an_unwatched_session_stores_the_message_but_appends_no_event(db_url):
    with Gateway.open(db_url) as gw:
        gw.create_session(MAIN)
        gw.create_session(GROUP)
        version = gw.ops.state_version(GROUP)
        assert gw.transcripts.human_message(GROUP, "hello", channel="telegram") is None
        assert gw.ops.state_version(GROUP) == version  # the state version did not move
        events = gw.session_status(GROUP, changes_since=0)["stateChanges"]["events"]
        assert "human_direct_message" not in [e["kind"] for e in events]
        assert [m.text for m in gw.transcripts.transcript(GROUP)] == ["hello"]  # the transcript keeps it


def test_a_human_turn_is_recorded_once_any_cursor_watches_and_shows_after_the_seed(db_url):
    with Gateway.open(db_url) as gw:
        gw.create_session(MAIN)
        gw.create_session(GROUP)
        assert gw.transcripts.human_message(GROUP, "before anyone watched") is None
        gw.watch(MAIN, GROUP, ambient=True)  # any provenance counts
        seed = gw.ops.state_version(GROUP)
        sequence = gw.transcripts.human_message(GROUP, "now watched", channel="slack")
        assert sequence is not None and sequence > seed
        kinds = [e["kind"] for e in gw.session_status(GROUP, changes_since=0)["stateChanges"]["events"]]
        assert kinds.count("human_direct_message") == 1  # only the watched turn
        gw.unwatch(MAIN, GROUP)
        assert gw.transcripts.human_message(GROUP, "nobody watches again") is None
        assert gw.ops.state_version(GROUP) == sequence


# -- R25: provenance --------------------------------------------------------------------------


def test_every_cursor_records_how_it_came_to_be(db_url):
    with Gateway.open(db_url) as gw:
        gw.create_session(MAIN)
        gw.create_session(GROUP)
        gw.create_session(OTHER)
        gw.create_session(CHILD, kind="subagent", parent=MAIN)
        gw.watch(MAIN, GROUP)
        gw.watch(MAIN, OTHER, ambient=True)
        assert gw.ops.cursor_positions(MAIN, CHILD).provenance == "spawn"
        assert gw.ops.cursor_positions(MAIN, GROUP).provenance == "explicit"
        assert gw.ops.cursor_positions(MAIN, OTHER).provenance == "ambient"
        # Still plain positions for everyone who only compares them.
        version = gw.ops.state_version(OTHER)
        assert gw.ops.cursor_positions(MAIN, OTHER) == (version, version, version)


def test_an_explicit_watch_promotes_an_ambient_cursor_and_ambient_never_demotes(db_url):
    with Gateway.open(db_url) as gw:
        gw.create_session(MAIN)
        gw.create_session(GROUP)
        gw.create_session(CHILD, kind="subagent", parent=MAIN)
        assert gw.watch(MAIN, GROUP, ambient=True) is True
        human(gw, GROUP)
        pending = gw.ops.cursor_positions(MAIN, GROUP)
        assert gw.watch(MAIN, GROUP) is False  # existing pair: positions kept ...
        promoted = gw.ops.cursor_positions(MAIN, GROUP)
        assert promoted == pending and promoted.provenance == "explicit"  # ... provenance raised
        assert gw.watch(MAIN, GROUP, ambient=True) is False
        assert gw.ops.cursor_positions(MAIN, GROUP).provenance == "explicit"
        gw.watch(MAIN, CHILD, ambient=True)
        assert gw.ops.cursor_positions(MAIN, CHILD).provenance == "spawn"


def test_watch_refuses_a_non_boolean_ambient(db_url):
    with Gateway.open(db_url) as gw:
        gw.create_session(MAIN)
        gw.create_session(GROUP)
        with pytest.raises(InvalidArgument):
            gw.watch(MAIN, GROUP, ambient="yes")  # type: ignore[arg-type]
        assert gw.ops.cursor_positions(MAIN, GROUP) is None


def test_provenance_survives_a_restart(db_url):
    with Gateway.open(db_url) as gw:
        gw.create_session(MAIN)
        gw.create_session(GROUP)
        gw.create_session(OTHER)
        gw.watch(MAIN, GROUP, ambient=True)
        gw.watch(MAIN, OTHER)
    with Gateway.open(db_url) as gw:
        assert gw.ops.cursor_positions(MAIN, GROUP).provenance == "ambient"
        assert gw.ops.cursor_positions(MAIN, OTHER).provenance == "explicit"


# -- R26: ambient cursors are queue-only -----------------------------------------------------


def test_an_ambient_notice_is_queued_and_drained_like_any_other_but_never_wakes(db_url):
    clock, wakes = Clock(), []
    with open_gateway(db_url, clock, wakes) as gw:
        gw.create_session(MAIN)
        gw.create_session(GROUP)
        gw.create_session(OTHER)
        # R27's announcements come first and wake nobody either.
        announced = [created_line(GROUP, "main", None), created_line(OTHER, "main", None)]
        assert gw.drain_system_events(MAIN) == announced
        gw.watch(MAIN, GROUP, ambient=True)
        seed = gw.ops.state_version(GROUP)
        human(gw, GROUP)
        assert gw.pending_system_events(MAIN) == [notice_text(GROUP, seed)]
        assert wakes == []
        # R23's heal: later material events past the window re-wake pending pairs, not this one.
        for _ in range(3):
            clock.now += 60
            human(gw, GROUP)
        assert wakes == []
        frozen = gw.ops.cursor_positions(MAIN, GROUP).notified
        assert gw.drain_system_events(MAIN) == [notice_text(GROUP, seed)]
        assert gw.pending_system_events(MAIN) == [notice_text(GROUP, frozen)]  # R8's follow-up
        assert wakes == []
        # The same watcher's explicit pair wakes as before: the check is per pair.
        gw.watch(MAIN, OTHER)
        human(gw, OTHER)
        assert wakes == [(MAIN, f"session-state: {OTHER}")]


def test_an_ambient_notice_re_materialised_at_startup_does_not_wake(db_url):
    clock, wakes = Clock(), []
    with open_gateway(db_url, clock, wakes) as gw:
        gw.create_session(MAIN)
        gw.create_session(GROUP)
        gw.watch(MAIN, GROUP, ambient=True)
        seed = gw.ops.state_version(GROUP)
        human(gw, GROUP)
    clock.now += 60
    with open_gateway(db_url, clock, wakes) as gw:
        assert gw.pending_system_events(MAIN) == [notice_text(GROUP, seed)]
        assert wakes == []


def test_a_promoted_pair_wakes_from_its_next_notice_on(db_url):
    clock, wakes = Clock(), []
    with open_gateway(db_url, clock, wakes) as gw:
        gw.create_session(MAIN)
        gw.create_session(GROUP)
        gw.watch(MAIN, GROUP, ambient=True)
        human(gw, GROUP)
        gw.drain_system_events(MAIN)
        gw.watch(MAIN, GROUP)
        clock.now += 60
        human(gw, GROUP)
        assert wakes == [(MAIN, f"session-state: {GROUP}")]


def test_a_notice_queued_while_ambient_is_woken_for_by_the_next_material_event_after_a_promotion(db_url):
    # R26 with R23's heal: no wake at the promotion itself, but the pending notice is not
    # stranded either (found by the stateful test: promoted pair, pending notice, material
    # event, no wake ever).
    clock, wakes = Clock(), []
    with open_gateway(db_url, clock, wakes) as gw:
        gw.create_session(MAIN)
        gw.create_session(GROUP)
        gw.watch(MAIN, GROUP, ambient=True)
        seed = gw.ops.state_version(GROUP)
        human(gw, GROUP)
        gw.watch(MAIN, GROUP)
        # Beside the notice, R27's announcement of GROUP: it wakes nobody either.
        pending = [created_line(GROUP, "main", None), notice_text(GROUP, seed)]
        assert wakes == [] and gw.pending_system_events(MAIN) == pending
        clock.now += 60
        human(gw, GROUP)  # coalesced into the pending notice: a heal, not a new line
        assert wakes == [(MAIN, f"session-state: {GROUP}")]


def test_a_gateway_without_on_wake_never_reads_the_provenance(db_url):
    with Gateway.open(db_url) as gw:
        gw.create_session(MAIN)
        gw.create_session(GROUP)
        gw.watch(MAIN, GROUP)
        reads: list[tuple[str, ...]] = []
        original = gw.store.cursor_provenance

        def counting(*args: str) -> str | None:
            reads.append(args)
            return original(*args)

        gw.store.cursor_provenance = counting  # type: ignore[method-assign]
        human(gw, GROUP)
        assert gw.pending_system_events(MAIN) and reads == []


# -- the trace --------------------------------------------------------------------------------


def test_seed_steps_carry_the_provenance_in_the_trace(db_url, tmp_path):
    path = tmp_path / "trace.jsonl"
    with Gateway.open(db_url, trace=path) as gw:
        gw.create_session(MAIN)
        gw.create_session(GROUP)
        gw.create_session(CHILD, kind="subagent", parent=MAIN)
        gw.watch(MAIN, GROUP, ambient=True)
        gw.watch(MAIN, GROUP)
    seeds = [json.loads(line) for line in path.read_text().splitlines()]
    seeds = [(s["target"][0], s["provenance"]) for s in seeds if s.get("op") == "step" and s["trigger"] == "seed"]
    assert seeds == [(CHILD, "spawn"), (GROUP, "ambient"), (GROUP, "explicit")]


def test_a_notice_opened_while_ambient_is_not_woken_by_a_promotion_in_its_transaction(db_url):
    watcher, target = "agent:w:main", "agent:t:main"
    clock, woken = Clock(), []
    with Gateway.open(db_url, clock=clock, wake_window=WINDOW,
                      on_wake=lambda who, reason: woken.append((who, clock.now))) as gw:
        start = clock.now
        gw.create_session(watcher)
        gw.create_session(target)
        gw.watch(watcher, target, ambient=True)
        with gw.transaction():
            human(gw, target)             # the notice opens while the pair is ambient ...
            gw.watch(watcher, target)     # ... and the pair is promoted before the commit
        assert woken == [] and len(gw.pending_system_events(watcher)) == 1
        clock.now = start + WINDOW + 5
        human(gw, target)                 # the heal wakes for it
        assert woken == [(watcher, start + WINDOW + 5)]


def test_a_promoted_pairs_only_queued_notice_is_woken_for_by_the_next_event(db_url):
    clock, woken = Clock(), []
    with Gateway.open(db_url, clock=clock, on_wake=lambda watcher, reason: woken.append(reason)) as gw:
        for key in (WATCHER, BEHIND):
            gw.create_session(key)
        gw.watch(WATCHER, BEHIND, ambient=True)
        since = gw.ops.cursor_positions(WATCHER, BEHIND).last_seen
        human_upstream(gw, BEHIND)
        assert gw.watch(WATCHER, BEHIND) is False  # the promotion: no wake for it yet
        assert woken == [] and gw.pending_system_events(WATCHER) == [notice_text(BEHIND, since)]
        clock.now += 2 * WINDOW
        human_upstream(gw, BEHIND)  # folded into the pending notice: no new line, but a wake
        assert woken == [f"session-state: {BEHIND}"]
        assert gw.pending_system_events(WATCHER) == [notice_text(BEHIND, since)]


def test_a_watcher_with_nothing_queued_is_promoted_reset_and_deleted_without_an_error(db_url, caplog):
    """The queue holds no entry at all for the watcher at each step."""
    woken: list[str] = []
    with caplog.at_level(logging.ERROR, logger="sessionstate"), Gateway.open(db_url, on_wake=lambda watcher, reason: woken.append(reason)) as gw:
        for key in (WATCHER, BEHIND, CAUGHT_UP):
            gw.create_session(key)
        gw.watch(WATCHER, BEHIND, ambient=True)
        assert gw.watch(WATCHER, BEHIND) is False  # promoted, caught up
        assert gw.ops.cursor_positions(WATCHER, BEHIND).provenance == "explicit"
        gw.ops.reset_session(WATCHER)
        assert gw.ops.cursor_positions(WATCHER, BEHIND) is None
        gw.watch(CAUGHT_UP, BEHIND)
        gw.ops.delete_session(CAUGHT_UP)
        assert gw.ops.cursor_positions(CAUGHT_UP, BEHIND) is None
        assert not gw.ops.session_exists(CAUGHT_UP)
        assert woken == [] and gw.pending_system_events(WATCHER) == []
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR] == []
