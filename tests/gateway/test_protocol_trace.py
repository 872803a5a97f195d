"""The protocol trace's promises that replay alone does not check (spec section 15): where and
how the file is made, when a batch reaches it, which batch a line belongs to after a
savepoint rolls back or a queue line lands between a commit and its notices, each line kind's
fields, that a write the kernel cut short is finished, that an event nobody watches is in the
file when ``record_event`` returns, and the ``unqueue`` lines of an unwatch and a reset."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from sessionstate import Gateway
from tests.gateway.helpers import BEHIND, CAUGHT_UP, human, human_upstream
from tests.verify.helpers import read_lines, traced_scenario

WATCHER = "agent:a:main"
OTHER_WATCHER = "agent:a:peer"
TARGET = "agent:b:main"
LONE = "agent:c:main"  # nobody watches it: its events open no notice
HUMAN = {"actor_type": "human", "summary": "a human message"}

# Every line's common fields (15.1) and each step kind's own.
COMMON = {"v", "pid", "gw", "n", "tx", "c", "op"}
STEP = COMMON | {"watcher", "target", "trigger", "seq", "before", "after", "effect", "notice"}


class Boom(Exception):
    pass


def opened(db_url: str, trace: Path, **settings: Any) -> Gateway:
    gw = Gateway.open(db_url, trace=trace, **settings)
    for key in (WATCHER, OTHER_WATCHER, TARGET, LONE):
        gw.create_session(key)
    return gw


def lines_of(trace: Path, op: str, **fields: Any) -> list[dict[str, Any]]:
    return [line for line in read_lines(trace) if line["op"] == op
            and all(line.get(name) == value for name, value in fields.items())]


# -- the file -----------------------------------------------------------------------------------


def test_a_trace_in_directories_not_made_yet_is_created_with_them(db_url, tmp_path):
    trace = tmp_path / "not" / "made" / "yet" / "trace.jsonl"
    Gateway.open(db_url, trace=trace).close()
    assert [line["op"] for line in read_lines(trace)] == ["open", "sweep", "close"]


def test_the_trace_file_is_created_readable_by_all_and_writable_by_its_owner_only(db_url, tmp_path):
    trace = tmp_path / "trace.jsonl"
    previous = os.umask(0)  # the mode the tracer asks for, not the one the umask leaves
    try:
        Gateway.open(db_url, trace=trace).close()
    finally:
        os.umask(previous)
    assert trace.stat().st_mode & 0o777 == 0o644


def test_a_write_the_kernel_cuts_short_is_finished_by_the_next(db_url, tmp_path, monkeypatch):
    """A full disk or a signal can split a write to a file: the rest follows, nothing is lost."""
    real_write = os.write

    def short_write(fd: int, data: bytes) -> int:
        return real_write(fd, bytes(data[:7]) if fd > 2 else data)  # never the test's own output

    trace = tmp_path / "trace.jsonl"
    monkeypatch.setattr(os, "write", short_write)
    with opened(db_url, trace) as gw:
        gw.watch(WATCHER, TARGET)
        gw.record_event(TARGET, "human_direct_message", **HUMAN)
    monkeypatch.undo()
    ops = [line["op"] for line in read_lines(trace)]
    assert ops[0] == "open" and ops[-1] == "close"
    assert ops.count("event") == 5 and ops.count("notice") == 1  # 4 "created" and the human's


def test_a_tracer_closed_twice_writes_one_close_line(tmp_path):
    from sessionstate.services.trace import Tracer

    class Store:  # what a tracer needs of a store (TracedStore); no transaction runs here
        url = "sqlite:///state.db"

        def observe_transactions(self, observer: object) -> None:
            pass

        def sequence_high_water(self) -> int:
            return 3

    trace = tmp_path / "trace.jsonl"
    tracer = Tracer(trace, Store())
    tracer.close()
    tracer.close()
    assert [line["op"] for line in read_lines(trace)] == ["open", "close"]


# -- when and in which batch lines are written -------------------------------------------------


def test_a_commit_without_notices_is_in_the_file_when_it_returns(db_url, tmp_path):
    """Only a commit that hands notices to the queue waits for them; a plain creation does not
    (a process killed after it returns must not lose its batch, 15.3)."""
    trace = tmp_path / "trace.jsonl"
    with Gateway.open(db_url, trace=trace) as gw:
        gw.create_session(WATCHER)
        created = lines_of(trace, "event", kind="created")
        assert [line["session"][0] for line in created] == [WATCHER]


def test_a_savepoint_rolled_back_drops_only_its_own_lines_and_its_sequences(db_url, tmp_path):
    trace = tmp_path / "trace.jsonl"
    with opened(db_url, trace) as gw:
        with gw.transaction():
            gw.watch(WATCHER, TARGET)
            with pytest.raises(Boom):
                with gw.transaction():
                    gw.record_event(TARGET, "human_direct_message", **HUMAN)
                    raise Boom
        high_water = gw.store.sequence_high_water()
    (seed,) = lines_of(trace, "step", trigger="seed")
    assert seed["watcher"] == WATCHER and seed["target"][0] == TARGET
    assert lines_of(trace, "event", kind="human_direct_message") == []
    # The commit key is read when the event that set it rolled back, not taken from it: four
    # "created" events, and on PostgreSQL the rolled-back one's sequence, not handed out again.
    assert seed["c"] == high_water >= 4


def test_queue_lines_between_a_commit_and_its_notices_go_out_with_that_commit(db_url, tmp_path):
    """15.1: the queue lines in between carry the commit's number and are written with it."""
    trace = tmp_path / "trace.jsonl"
    with opened(db_url, trace) as gw:
        gw.watch(WATCHER, TARGET)
        gw.record_event(TARGET, "human_direct_message", **HUMAN)  # a notice queued for WATCHER
        with gw.transaction():
            gw.unwatch(WATCHER, TARGET)  # withdraws the notice after the commit
            gw.record_event(LONE, "human_direct_message", **HUMAN)  # opens no notice
    (unqueue,) = lines_of(trace, "unqueue", watcher=WATCHER)
    (event,) = lines_of(trace, "event", kind="human_direct_message", session=[LONE, "c"])
    assert (unqueue["tx"], unqueue["n"]) == (event["tx"], event["n"])


def test_a_queue_line_made_inside_a_committed_transaction_is_traced(db_url, tmp_path):
    """``forget_queued`` drops the lines at once, also inside a transaction (inside one that
    rolls back: test_forget_queued_in_a_transaction_that_rolls_back_keeps_the_queue_and_its_trace)."""
    trace = tmp_path / "trace.jsonl"
    with opened(db_url, trace) as gw:
        gw.watch(WATCHER, TARGET)
        gw.record_event(TARGET, "human_direct_message", **HUMAN)
        with gw.transaction():
            gw.watch(OTHER_WATCHER, TARGET)
            gw.ops.forget_queued(WATCHER)
    (unqueue,) = lines_of(trace, "unqueue", watcher=WATCHER)
    assert unqueue["target"][0] == TARGET


def test_the_notices_a_commit_opened_carry_its_number_after_a_wake_it_asked_for(db_url, tmp_path):
    """A wake released by an earlier call of the same transaction joins the held batch; the
    notices that follow it still go out with their commit (15.1)."""
    trace = tmp_path / "trace.jsonl"
    with opened(db_url, trace, on_wake=lambda watcher, reason: None) as gw:
        gw.watch(WATCHER, TARGET)
        with gw.transaction():
            gw.ops.enqueue_system_event(WATCHER, "a system line")  # wakes WATCHER after the commit
            gw.record_event(TARGET, "human_direct_message", **HUMAN)  # opens WATCHER's notice
    (event,) = lines_of(trace, "event", kind="human_direct_message")
    (wake,) = lines_of(trace, "wake")
    (notice,) = lines_of(trace, "notice")
    assert wake["watcher"] == WATCHER
    assert (notice["tx"], notice["n"]) == (event["tx"], event["n"])


# -- each line kind's fields -------------------------------------------------------------------


def test_each_step_carries_the_fields_of_its_trigger_and_no_others(db_url, tmp_path):
    trace = tmp_path / "trace.jsonl"
    with opened(db_url, trace) as gw:
        gw.watch(WATCHER, TARGET)
        gw.record_event(TARGET, "human_direct_message", **HUMAN)
        gw.drain_system_events(WATCHER)
        gw.unwatch(WATCHER, TARGET)
    fields = {line["trigger"]: set(line) for line in lines_of(trace, "step")}
    assert fields == {
        "seed": STEP | {"provenance"},
        "material_event": STEP | {"kind", "actor"},
        "drain": STEP | {"delivered"},
        "unwatch": STEP,
    }


def test_a_notice_for_a_watcher_served_elsewhere_is_traced_as_not_served(db_url, tmp_path):
    trace = tmp_path / "trace.jsonl"
    with opened(db_url, trace, serve=[]) as gw:  # R19: this process serves nobody
        gw.watch(WATCHER, TARGET)
        gw.record_event(TARGET, "human_direct_message", **HUMAN)
    (notice,) = lines_of(trace, "notice")
    assert notice["watcher"] == WATCHER and notice["queued"] is False and notice["served"] is False


def test_a_wake_is_traced_as_owed_exactly_when_the_timer_fired_it(tmp_path):
    wakes = lines_of(traced_scenario(tmp_path), "wake")
    assert [(line["owed"], line["due"] is not None) for line in wakes] == [(False, False), (True, True)]


def test_a_pruning_chunk_lists_every_pending_cursor_it_wrote_back(db_url, tmp_path):
    trace = tmp_path / "trace.jsonl"
    with opened(db_url, trace, max_rows=2) as gw:
        gw.watch(WATCHER, TARGET)
        gw.watch(OTHER_WATCHER, TARGET)
        for _ in range(3):
            gw.record_event(TARGET, "human_direct_message", **HUMAN)
        gw.prune()
    cursors = [row for line in lines_of(trace, "prune") for row in line["cursors"]]
    assert sorted(row[0] for row in cursors) == [WATCHER, OTHER_WATCHER]


def test_forget_queued_in_a_transaction_that_rolls_back_keeps_the_queue_and_its_trace(db_url, tmp_path):
    """The queue is memory, its trace lines ride with the transaction: a rolled-back
    ``forget_queued`` drops neither, so the run's trace replays clean (no second queueing)."""
    import contextlib
    import io

    from sessionstate.clients.cli import main

    trace = tmp_path / "trace.jsonl"
    with opened(db_url, trace) as gw:
        gw.watch(WATCHER, TARGET)
        gw.record_event(TARGET, "human_direct_message", **HUMAN)
        queued = gw.ops.queued_events(WATCHER)
        assert [line.target[0] for line in queued if line.target] == [TARGET]
        with pytest.raises(RuntimeError):
            with gw.transaction():
                gw.ops.forget_queued(WATCHER)
                raise RuntimeError("rolled back")
        assert gw.ops.queued_events(WATCHER) == queued
        gw.ops.startup_sweep()
        assert gw.ops.queued_events(WATCHER) == queued
        with gw.transaction():  # a later commit of the same gateway: now the lines go
            gw.ops.forget_queued(WATCHER)
            assert gw.ops.queued_events(WATCHER) == queued  # not before the commit
        assert gw.ops.queued_events(WATCHER) == []
    assert len(lines_of(trace, "unqueue", watcher=WATCHER)) == 1
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["replay", "--no-progress", str(trace)])
    assert code == 0, out.getvalue()


def test_an_event_nobody_watches_is_in_the_trace_when_it_returns(db_url, tmp_path):
    trace = tmp_path / "trace.jsonl"
    with Gateway.open(db_url, trace=trace) as gw:
        gw.create_session("agent:lone:main")
        human(gw, "agent:lone:main")
        assert len(lines_of(trace, "event", kind="human_direct_message")) == 1


def test_the_trace_records_each_notice_an_unwatch_withdraws_and_a_reset_clears(db_url, tmp_path, caplog):
    path = tmp_path / "trace.jsonl"
    with caplog.at_level(logging.ERROR, logger="sessionstate"), Gateway.open(db_url, trace=path) as gw:
        for key in (WATCHER, BEHIND, CAUGHT_UP):
            gw.create_session(key)
        gw.watch(WATCHER, BEHIND)
        gw.watch(WATCHER, CAUGHT_UP)
        human_upstream(gw, BEHIND)
        human_upstream(gw, CAUGHT_UP)
        withdrawn, cleared = gw.pending_system_events(WATCHER)
        gw.unwatch(WATCHER, BEHIND)
        gw.ops.reset_session(WATCHER)
        gw.ops.reset_session(WATCHER)  # again, with nothing queued: nothing to record
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR] == []
    unqueued = [
        (line["watcher"], line["target"], line["text"])
        for line in map(json.loads, path.read_text().splitlines())
        if line.get("op") == "unqueue"
    ]
    # agent-qualified keys carry their agent id: agent:<id>:main
    assert unqueued == [
        (WATCHER, [BEHIND, "behind"], withdrawn),
        (WATCHER, [CAUGHT_UP, "calm"], cleared),
    ]
