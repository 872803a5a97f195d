"""Protocol traces: real runs replay clean; a trace corrupted in one line is rejected by rule."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from sessionstate import Gateway, notice_text
from sessionstate.clients.cli import main
from sessionstate.clients.demo.story import run_demo
from sessionstate.verify.trace_check import TraceChecker, Violation
from sessionstate.verify.trace_read import read_trace
from tests.verify.helpers import (
    MAIN,
    PEER,
    TARGET,
    find,
    op,
    read_lines,
    step,
    traced_scenario,
    write_lines,
)
from trials.workload import ensure_sessions

Lines = list[dict[str, Any]]


def replay(*paths: Path) -> tuple[int, str]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["replay", "--no-progress", *map(str, paths)])
    return code, out.getvalue()


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Lines:
    return read_lines(traced_scenario(tmp_path_factory.mktemp("scenario")))


# -- real runs replay clean ----------------------------------------------------------------------


def test_the_scenario_trace_replays_clean_and_covers_every_effect(scenario, tmp_path):
    code, out = replay(write_lines(tmp_path / "t.jsonl", scenario))
    assert code == 0, out
    assert "OK:" in out and "1 process(es), 5 gateway(s)" in out
    effects = {line["effect"] for line in scenario if line["op"] == "step"}
    assert effects == {"seed", "keep", "freeze", "ack", "sweep", "remove"}  # raise_material is derived (R7)
    assert {line["op"] for line in scenario} == {
        "open", "event", "step", "notice", "unqueue", "sweep", "reset", "prune", "delete", "wake", "close"}


def test_the_demo_trace_replays_clean(tmp_path, monkeypatch, capsys):
    trace = tmp_path / "demo.jsonl"
    monkeypatch.setenv("SESSIONSTATE_TRACE", str(trace))
    assert run_demo(str(tmp_path / "demo.db")) == 0
    capsys.readouterr()
    code, out = replay(trace)
    assert code == 0, out
    lines = read_lines(trace)
    assert sum(line["op"] == "step" for line in lines) >= 10 and any(line["op"] == "prune" for line in lines)


@pytest.mark.parametrize("shared_file", [False, True], ids=["a-file-each", "one-shared-file"])
def test_a_two_process_run_replays_clean(tmp_path, shared_file):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    traces = [tmp_path / "setup.jsonl"] + [tmp_path / ("shared.jsonl" if shared_file else f"p{i}.jsonl")
                                           for i in range(2)]
    with Gateway.open(url, trace=traces[0]) as gw:
        ensure_sessions(gw)
    start = time.time() + 1.5
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "trials.concurrency_worker", url, str(tmp_path / f"out{i}.json"),
             str(i), "150", str(start), str(i), "2"],
            env={**os.environ, "SESSIONSTATE_TRACE": str(traces[1 + i])},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(2)
    ]
    for child in children:
        _, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
    files = sorted(set(traces))
    code, out = replay(*files)
    assert code == 0, out
    assert "3 process(es)" in out
    pids = {line["pid"] for path in files for line in read_lines(path)}
    assert len(pids) == 3


def test_a_run_inside_one_extension_transaction_writes_nothing_when_rolled_back(tmp_path):
    trace = tmp_path / "t.jsonl"
    with Gateway.open(tmp_path / "s.db", trace=trace) as gw:
        gw.create_session(MAIN)
        gw.create_session(TARGET)
        gw.watch(MAIN, TARGET)
        with pytest.raises(RuntimeError), gw.transaction():
            gw.record_event(TARGET, "goal_changed", actor_type="human", summary="rolled back")
            raise RuntimeError("the extension fails")
        gw.record_event(TARGET, "goal_changed", actor_type="human", summary="kept")
    lines = read_lines(trace)
    events = [line["kind"] for line in lines if line["op"] == "event"]
    # The sessions' own `created` (R27, on by default) and the kept event: the rolled-back one
    # (same sequence: its AUTOINCREMENT rolled back too) is absent.
    assert events == ["created", "created", "goal_changed"]
    assert replay(trace)[0] == 0


def test_tracing_is_off_without_a_path(tmp_path, monkeypatch):
    monkeypatch.delenv("SESSIONSTATE_TRACE", raising=False)
    with Gateway.open(tmp_path / "s.db") as gw:
        assert not gw.ops.diagnostics().tracing
        assert "transaction" not in vars(gw.store)  # the store's transactions are not wrapped


def test_tracing_patches_nothing_and_still_sees_every_transaction_and_unqueue(tmp_path):
    """The tracer observes through the unit of work's and the queue's hooks: no method of the
    store or the queue is replaced on the instance, yet a transaction an extension opens on
    the store itself is traced, and a notice leaving the queue is on record."""
    trace = tmp_path / "t.jsonl"
    with Gateway.open(tmp_path / "s.db", trace=trace) as gw:
        assert gw.ops.diagnostics().tracing
        queue = gw.ops.queue  # white-box on purpose: the check is about this instance's methods
        patched = [name for name in ("transaction", "after_commit") if name in vars(gw.store)]
        patched += [name for name in ("remove", "withdraw_notice", "clear") if name in vars(queue)]
        assert patched == []
        gw.create_session(MAIN)
        gw.create_session(TARGET)
        gw.watch(MAIN, TARGET)
        with gw.store.transaction():  # an extension's own transaction on the store
            gw.record_event(TARGET, "human_direct_message", actor_type="human", summary="direct")
        assert gw.drain_system_events(MAIN) == [notice_text(TARGET, 2)]  # both created come first (R27)
    lines = read_lines(trace)
    assert [line["op"] for line in lines if line["op"] in ("event", "notice", "unqueue")] == ["event", "event", "event", "notice", "unqueue"]  # created, created, the human turn
    assert replay(trace)[0] == 0


# -- one-line corruptions are rejected with the rule they break ------------------------------------


def _freeze(lines: Lines) -> int:
    return find(lines, step("material_event", "freeze"))


def _edit(index_of: Callable[[Lines], int], **fields: Any) -> Callable[[Lines], None]:
    def mutate(lines: Lines) -> None:
        lines[index_of(lines)].update(fields)

    return mutate


def _drop(index_of: Callable[[Lines], int]) -> Callable[[Lines], None]:
    return lambda lines: lines.pop(index_of(lines)) and None


def _duplicate(index_of: Callable[[Lines], int]) -> Callable[[Lines], None]:
    def mutate(lines: Lines) -> None:
        i = index_of(lines)
        lines.insert(i + 1, copy.deepcopy(lines[i]))

    return mutate


def _swap_with_previous(index_of: Callable[[Lines], int]) -> Callable[[Lines], None]:
    def mutate(lines: Lines) -> None:
        i = index_of(lines)
        lines[i - 1], lines[i] = lines[i], lines[i - 1]

    return mutate


def _positions_of(index_of: Callable[[Lines], int], field: str, value: Any) -> Callable[[Lines], None]:
    return _edit(index_of, **{field: value})


def _first_notice(lines: Lines) -> int:
    return find(lines, op("notice", queued=True))


def _deduplicated_notice_changed(lines: Lines) -> None:
    line = lines[find(lines, op("notice", queued=False))]
    line["queued"] = True
    line["text"] = notice_text(TARGET, 0)


def _prune_head_above_version(lines: Lines) -> None:
    line = lines[find(lines, op("prune"))]
    line["heads"][0][2] = 10_000


def _prune_cursor_material(lines: Lines) -> None:
    line = lines[find(lines, op("prune"))]
    line["cursors"][0][3] = [1, 9, 8 + 100]


def _seed_moved(lines: Lines) -> None:
    line = lines[find(lines, step("seed", "seed", watcher=PEER))]
    line["seq"] = 7
    line["after"] = [7, 7, 7]


def _event_kind(lines: Lines) -> None:
    lines[_freeze(lines) - 1]["kind"] = "compacted"


def _event_sequence_back(lines: Lines) -> None:
    lines[find(lines, op("event", kind="goal_changed"))]["seq"] = 2


def _drop_whole_batch(lines: Lines) -> None:
    i = find(lines, step("drain", "ack", notice=None))
    assert lines[i - 1]["tx"] != lines[i]["tx"] and lines[i + 1]["tx"] != lines[i]["tx"]
    lines.pop(i)


def _swap_batches(lines: Lines) -> None:
    i = find(lines, step("drain", "ack", notice=None))
    lines[i - 1], lines[i] = lines[i], lines[i - 1]


def _owed_wake_moved(*, at: float, watcher: str | None = None) -> Callable[[Lines], None]:
    def mutate(lines: Lines) -> None:
        (index,) = [i for i, line in enumerate(lines) if line["op"] == "wake" and line["owed"]]
        lines[index]["at"] += at
        if watcher is not None:  # another watcher's owed wake, due later: MAIN's is skipped
            lines[index]["watcher"] = watcher
            lines[index]["due"] += at
    return mutate


CORRUPTIONS: dict[str, tuple[Callable[[Lines], None], str]] = {
    # invariants
    "INV1 positions edited out of order": (_positions_of(_freeze, "after", [3, 2, 2]), "INV1"),
    "INV2 a notice duplicated": (_duplicate(_first_notice), "INV2"),
    "INV3 a pending notice's text changed": (_deduplicated_notice_changed, "INV3"),
    "INV4 a queued notice dropped": (_drop(_first_notice), "INV4"),
    "INV5 a self event opens a notice": (
        _edit(lambda ls: find(ls, step("self_event")), notice=0), "INV5"),
    "INV6 a freeze step dropped": (_drop(_freeze), "INV6"),
    "INV7 an event sequence moved back": (_event_sequence_back, "INV7"),
    "INV7 a pruned watermark above the head": (_prune_head_above_version, "INV7"),
    # effects
    "seed positions edited": (_positions_of(lambda ls: find(ls, step("seed", "seed")), "after", [0, 0, 0]),
                              "EFFECT seed"),
    "keep positions edited": (_positions_of(lambda ls: find(ls, step("self_event", "keep")), "after", [6, 7, 7]),
                              "EFFECT keep"),
    "freeze positions edited": (_positions_of(_freeze, "after", [0, 3, 3]), "EFFECT freeze"),
    "raise_material positions edited": (
        _positions_of(lambda ls: find(ls, step("restart_sweep", "sweep", watcher=PEER)), "before", [0, 2, 5]), "T3"),
    "ack positions edited": (_positions_of(lambda ls: find(ls, step("drain", "ack")), "after", [2, 3, 6]),
                             "EFFECT ack"),
    "sweep positions edited": (
        _positions_of(lambda ls: find(ls, step("restart_sweep", "sweep", watcher=PEER)), "after", [0, 5, 6]),
        "EFFECT sweep"),
    "remove positions edited": (_positions_of(lambda ls: find(ls, step("unwatch", "remove")), "after", [0, 6, 6]),
                                "EFFECT remove"),
    "freeze notice edited": (_edit(_freeze, notice=1), "EFFECT freeze"),
    # rules
    "R1 a log-only kind fires material_event": (_event_kind, "R1"),
    "R2 a self event fired as material": (_edit(lambda ls: find(ls, step("self_event")), trigger="material_event",
                                                effect="freeze"), "R2"),
    "R4 a watch seeded off the head": (_seed_moved, "R4"),
    "R7 pruning wrote the wrong material watermark": (_prune_cursor_material, "R7"),
    "R11 a sweep step dropped": (_drop(lambda ls: find(ls, step("restart_sweep", "sweep", watcher=PEER))), "R11"),
    "R14 a reset step dropped": (_drop(lambda ls: find(ls, step("reset_watcher"))), "R14"),
    "R17 a drain delivers another text": (_edit(lambda ls: find(ls, step("drain")), delivered="other"), "R17"),
    "R21 a drain skips a pending pair": (_drop(lambda ls: find(ls, step("drain", "ack", watcher=MAIN,
                                                                   target=[PEER, "a"]))), "R21"),
    "TABLE an illegal trigger": (_edit(lambda ls: find(ls, step("self_event")), trigger="drain"), "TABLE"),
    # wakes (R12, R23)
    "WAKE1 two wakes within one window": (_owed_wake_moved(at=-15.0), "WAKE1"),
    "LIV1 the owed wake went to another watcher, late": (_owed_wake_moved(at=5.0, watcher=TARGET), "LIV1"),
    # order and loss
    "T2 a step moved before its event": (_swap_with_previous(_freeze), "T2"),
    "T2 a whole batch dropped": (_drop_whole_batch, "T2"),
    "T2 two batches swapped": (_swap_batches, "T2"),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_a_trace_corrupted_in_one_line_is_rejected_with_its_rule(scenario, tmp_path, name):
    mutate, rule = CORRUPTIONS[name]
    lines = copy.deepcopy(scenario)
    mutate(lines)
    assert lines != scenario
    code, out = replay(write_lines(tmp_path / "t.jsonl", lines))
    assert code == 1, out
    assert out.startswith(f"VIOLATION {rule}:"), out
    assert "the steps that led there:" in out or rule.startswith("T")


def test_the_checker_names_the_rule_and_the_line(scenario, tmp_path):
    lines = copy.deepcopy(scenario)
    _drop(_freeze)(lines)
    path = write_lines(tmp_path / "t.jsonl", lines)
    with pytest.raises(Violation) as caught:
        TraceChecker().run([read_trace(path)])
    assert caught.value.rule == "INV6" and caught.value.line is not None
    assert caught.value.context, "the steps that led there"


def test_a_malformed_line_is_a_format_violation(scenario, tmp_path):
    path = write_lines(tmp_path / "t.jsonl", scenario)
    text = path.read_text(encoding="utf-8").splitlines(keepends=True)
    text.insert(3, "{not json}\n")
    path.write_text("".join(text), encoding="utf-8")
    code, out = replay(path)
    assert code == 1 and out.startswith("VIOLATION T1"), out


def test_another_format_version_is_refused(scenario, tmp_path):
    lines = copy.deepcopy(scenario)
    lines[0]["v"] = 99
    code, out = replay(write_lines(tmp_path / "t.jsonl", lines))
    assert code == 1 and "version 99" in out, out


# -- a trace cut by a crash ----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["last line", "inside a transaction"])
def test_a_trace_cut_mid_line_is_read_to_its_last_full_line_and_reported(scenario, tmp_path, where):
    data = "".join(json.dumps(line) + "\n" for line in scenario)
    if where == "last line":
        cut = len(data) - 20
    else:
        # inside the notice line that follows the first freeze: its transaction is incomplete
        i = _first_notice(scenario)
        cut = len("".join(json.dumps(line) + "\n" for line in scenario[:i])) + 60
    path = tmp_path / "t.jsonl"
    path.write_text(data[:cut], encoding="utf-8")
    code, out = replay(path)
    assert code == 0, out
    assert f"cut: {path}:" in out and "a line cut short" in out
    full_lines = data[:cut].count("\n")
    assert f" {full_lines} lines in" in out


def test_a_cut_trace_still_reports_violations_before_the_cut(scenario, tmp_path):
    lines = copy.deepcopy(scenario)
    _positions_of(_freeze, "after", [0, 3, 3])(lines)
    data = "".join(json.dumps(line) + "\n" for line in lines)
    path = tmp_path / "t.jsonl"
    path.write_text(data[:-15], encoding="utf-8")
    code, out = replay(path)
    assert code == 1 and out.startswith("VIOLATION EFFECT freeze") and "cut:" in out, out


# -- the command ---------------------------------------------------------------------------------


def test_the_progress_bar_goes_to_stderr(scenario, tmp_path):
    path = write_lines(tmp_path / "t.jsonl", scenario)
    run = subprocess.run([sys.executable, "-m", "sessionstate.clients.cli", "replay", "--progress", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "100%" in run.stderr and "checking" in run.stderr
    assert "OK:" in run.stdout


def test_a_missing_file_is_a_usage_error(tmp_path):
    assert replay(tmp_path / "absent.jsonl")[0] == 2


def test_traces_of_two_databases_are_not_merged(tmp_path):
    for name in ("a", "b"):
        with Gateway.open(tmp_path / f"{name}.db", trace=tmp_path / f"{name}.jsonl") as gw:
            gw.create_session(MAIN)
    code, out = replay(tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    assert code == 1 and "different databases" in out, out


def test_the_summary_counts(scenario, tmp_path):
    code, out = replay(write_lines(tmp_path / "t.jsonl", scenario))
    steps = sum(line["op"] == "step" for line in scenario)
    pairs = {(line["watcher"], tuple(line["target"])) for line in scenario if line["op"] == "step"}
    notices = sum(line["op"] == "notice" for line in scenario)
    assert f"{steps} steps on {len(pairs)} pairs" in out and f"{notices} notices" in out
    assert MAIN and PEER  # the scenario's sessions are the ones the corruptions name


def test_the_spec_lists_exactly_the_ops_the_tracer_writes_and_the_checker_reads(scenario):
    from sessionstate.verify.trace_check import TraceChecker
    from tests.protocol.spec_tables import table_rows

    spec_ops = {row[0] for row in table_rows("15. Protocol trace")}
    checker_ops = {name.removeprefix("_op_") for name in vars(TraceChecker) if name.startswith("_op_")}
    written_ops = {line["op"] for line in scenario}
    assert spec_ops == checker_ops == written_ops


def test_the_open_line_names_the_backend_and_hides_a_password():
    from sessionstate.services.trace import Tracer

    class Store:
        url = "postgresql://alice:secret@db.example/state"

        def observe_transactions(self, observer: object) -> None:  # no transaction runs here
            pass

        def sequence_high_water(self) -> int:
            return 41

    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "t.jsonl"
        Tracer(path, Store()).close()
        first = read_lines(path)[0]
    assert first["op"] == "open" and first["backend"] == "postgresql" and first["c"] == 41
    assert "secret" not in first["db"] and "db.example/state" in first["db"]


def test_a_crash_then_a_restart_on_the_same_trace_file_replays_clean(tmp_path):
    """A worker killed with SIGKILL mid-run; a new process opens the same database and appends
    to the same trace: a line cut short, if the kill hit a write, has the next line glued to it."""
    import signal

    url = f"sqlite:///{tmp_path / 'state.db'}"
    trace = tmp_path / "trace.jsonl"
    with Gateway.open(url, trace=trace) as gw:
        ensure_sessions(gw)
    child = subprocess.Popen(
        [sys.executable, "-m", "trials.concurrency_worker", url, str(tmp_path / "out.json"),
         "7", "100000", str(time.time()), "0", "1"],
        env={**os.environ, "SESSIONSTATE_TRACE": str(trace)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    size = trace.stat().st_size
    deadline = time.time() + 60
    while trace.stat().st_size < size + 50_000 and time.time() < deadline:
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    with Gateway.open(url, trace=trace) as gw:  # the restart: startup sweep, then more work
        gw.record_event("agent:w1:main", "human_direct_message", actor_type="human", summary="after")
        for key in ("agent:w0:main", "agent:w1:main", "agent:w3:main"):
            gw.drain_system_events(key)
    code, out = replay(trace)
    assert code == 0, out
    assert "2 process(es), 3 gateway(s)" in out


def test_a_line_cut_inside_the_file_is_skipped_and_the_glued_line_read(scenario, tmp_path):
    data = [json.dumps(line) + "\n" for line in scenario]
    i = _first_notice(scenario)
    data[i] = data[i][:40]  # a crash cut this line; the next process's line follows it directly
    path = tmp_path / "t.jsonl"
    path.write_text("".join(data), encoding="utf-8")
    code, out = replay(path)
    assert f"cut: {path}:{i + 1}:" in out, out
    # the cut notice line belonged to a committed transaction: its unit is not held to account
    assert code == 0, out


def test_a_gateway_that_ends_unclosed_may_have_lost_its_last_batch(scenario, tmp_path):
    """Killed between COMMIT and the write: the pairs are taken again from their next step."""
    unwatch = scenario[find(scenario, step("unwatch", "remove"))]
    crashed = [line for line in scenario if not (line["gw"] == unwatch["gw"] and line["tx"] >= unwatch["tx"])]
    code, out = replay(write_lines(tmp_path / "crashed.jsonl", crashed))
    assert code == 0, out
    assert "resynchronised: 1 pair(s)" in out
    # the same loss in a gateway that closed afterwards is a lost batch
    closed = [line for line in scenario if not (line["gw"] == unwatch["gw"] and line["tx"] == unwatch["tx"])]
    code, out = replay(write_lines(tmp_path / "lost.jsonl", closed))
    assert code == 1 and out.startswith("VIOLATION T2"), out


def test_a_second_drain_step_for_one_pair_in_one_drain_is_inv10(scenario, tmp_path):
    """MAIN's two drains on TARGET (an ack with a follow-up notice, then an ack to caught up)
    written as one transaction: the follow-up delivered in the drain that queued it."""
    first = find(scenario, step("drain", "ack", watcher=MAIN, target=[TARGET, "b"]))
    second = find(scenario, step("drain", "ack", watcher=MAIN, target=[TARGET, "b"]), nth=1)
    gateway, tx = scenario[first]["gw"], scenario[first]["tx"]
    assert scenario[second]["gw"] == gateway and scenario[second]["tx"] == tx + 1
    lines = copy.deepcopy(scenario)
    for line in lines[second:]:
        if line["gw"] == gateway:
            line["tx"] -= 1  # the gateway's transactions stay numbered one after another
    lines[second]["n"] = lines[first]["n"]
    code, out = replay(write_lines(tmp_path / "t.jsonl", lines))
    assert code == 1 and out.startswith("VIOLATION INV10: a second drain step for"), out


def test_a_pair_resynchronised_in_the_middle_of_a_drain_is_delivered_once(tmp_path):
    """A gateway dies without closing; its last transaction (an unwatch, no event) ties on the
    commit key with the restarted gateway's sweep and is replayed after it, so every pair is
    resynchronised again. The restarted gateway's drain then steps a pair it resynchronises
    before a pair it was still resynchronising: both are delivered once, no INV10."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    trace = tmp_path / "trace.jsonl"
    human = {"actor_type": "human", "summary": "a human message"}
    crashed = Gateway.open(url, trace=trace)
    for key in (MAIN, PEER, TARGET):
        crashed.create_session(key)
    crashed.watch(MAIN, TARGET)
    crashed.watch(MAIN, PEER)
    crashed.watch(PEER, TARGET)
    crashed.record_event(TARGET, "human_direct_message", **human)
    crashed.record_event(PEER, "human_direct_message", **human)
    restarted = Gateway.open(url, trace=trace)  # its sweep reads the commit key of the unwatch
    crashed.unwatch(PEER, TARGET)  # the crashed gateway's last transaction
    restarted.record_event(PEER, "goal_changed", **human)
    restarted.drain_system_events(MAIN)
    restarted.close()
    crashed.close()
    lines = read_lines(trace)
    first_gateway = lines[0]["gw"]
    names = {line["gw"]: "ffffffff" if line["gw"] == first_gateway else "00000000" for line in lines}
    lines = [line for line in lines if not (line["gw"] == first_gateway and line["op"] == "close")]  # the crash
    for line in lines:
        line["gw"] = names[line["gw"]]  # ties go to the sorted-first gateway: the sweep's
    sweep = lines[find(lines, op("sweep", gw="00000000"))]
    unwatch = lines[find(lines, step("unwatch", "remove"))]
    assert sweep["c"] == unwatch["c"]
    drained = [line["target"][0] for line in lines if line["op"] == "step" and line["trigger"] == "drain"]
    assert drained == [PEER, TARGET]
    code, out = replay(write_lines(tmp_path / "t.jsonl", lines))
    assert code == 0, out
    assert "resynchronised:" in out


@pytest.mark.parametrize("how", ["delete the target", "reset the watcher"])
def test_a_notice_that_replaces_its_pairs_text_from_an_episode_ended_elsewhere_replays_clean(tmp_path, how):
    """R5 in a trace: gateway a holds MAIN's notice on TARGET when gateway b ends that episode
    (a delete of TARGET or a reset of MAIN); before a's sweep, a watches again and an event
    freezes the pair: the new notice enters a's queue in place of the stale text, which the
    trace shows leaving, so a holds one text for the pair (INV2)."""
    trace, url = tmp_path / "t.jsonl", tmp_path / "s.db"
    human = {"actor_type": "human", "summary": "a human message"}
    with Gateway.open(url, trace=trace, notify_on_create=False) as a, \
            Gateway.open(url, trace=trace, notify_on_create=False) as b:
        a.create_session(MAIN)
        a.create_session(TARGET)
        a.watch(MAIN, TARGET)
        a.record_event(TARGET, "human_direct_message", **human)
        if how == "delete the target":
            b.ops.delete_session(TARGET)
            a.create_session(TARGET)
        else:
            b.ops.reset_session(MAIN)
        a.watch(MAIN, TARGET)
        a.record_event(TARGET, "human_direct_message", **human)
    code, out = replay(trace)
    assert code == 0, out


def test_the_two_process_demo_trace_replays_clean(tmp_path):
    """`demo --processes 2`: a served manager with the change pump, a recorder process that
    serves nothing, both appending to the one trace file they inherit through the environment."""
    trace = tmp_path / "demo2.jsonl"
    run = subprocess.run(
        [sys.executable, "-m", "sessionstate.clients.cli", "demo", "--processes", "2", "--db", str(tmp_path / "d.db")],
        env={**os.environ, "SESSIONSTATE_TRACE": str(trace)}, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    code, out = replay(trace)
    assert code == 0, out
    assert "2 process(es)" in out
    assert any(line["op"] == "notice" and line["served"] is False for line in read_lines(trace))


# -- one position at a time (L, N or M), each T-rule on its own -------------------------------------

POSITIONS = ("L", "N", "M")


def _one_position(where: str, index: int, change: Callable[[Any], Any]) -> Callable[[Lines], None]:
    """The drain's ack step of MAIN on PEER with one of its ``before``/``after`` positions changed."""
    def mutate(lines: Lines) -> None:
        line = lines[find(lines, step("drain", "ack", watcher=MAIN, target=[PEER, "a"]))]
        line[where] = list(line[where])
        line[where][index] = change(line[where][index])
    return mutate


# Each position alone (the step's before is [2, 15, 15]): T3 where the change keeps the
# positions ordered (a step that does not start where the pair's last step left it), INV1 where
# it does not; T1 a position that is not a number; the effect's result with one position edited.
_MOVES = [("L", 0, +1, "T3"), ("L", 0, -1, "T3"), ("N", 1, -1, "T3"), ("M", 2, +1, "T3"),
          ("N", 1, +1, "INV1"), ("M", 2, -1, "INV1")]
ONE_POSITION = {
    **{f"{rule} {p} moved by {d:+d} in before": (_one_position("before", i, lambda v, d=d: v + d), rule)
       for p, i, d, rule in _MOVES},
    **{f"T1 {p} not a number in before": (_one_position("before", i, lambda v: "x"), "T1")
       for i, p in enumerate(POSITIONS)},
    **{f"T1 {p} not a number in after": (_one_position("after", i, lambda v: "x"), "T1")
       for i, p in enumerate(POSITIONS)},
    # the ack leaves [15, 15, 15]: only L can move alone and stay ordered
    **{f"{rule} {p} moved by {d:+d} in after": (_one_position("after", i, lambda v, d=d: v + d), rule)
       for p, i, d, rule in [("L", 0, -1, "EFFECT ack"), ("N", 1, -1, "INV1"), ("M", 2, +1, "INV1")]},
}


@pytest.mark.parametrize("name", sorted(ONE_POSITION))
def test_one_position_changed_alone_is_rejected(scenario, tmp_path, name):
    mutate, rule = ONE_POSITION[name]
    lines = copy.deepcopy(scenario)
    mutate(lines)
    assert lines != scenario
    code, out = replay(write_lines(tmp_path / "t.jsonl", lines))
    assert code == 1, out
    assert out.startswith(f"VIOLATION {rule}:"), out
