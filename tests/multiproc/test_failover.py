"""Issue 32: a PostgreSQL primary is killed under load and its standby promoted.

The trial (``trials.failover``) runs two writer processes and a pumped serving
process on the multi-host URL, injects an unknown commit outcome through a proxy (a drain's
COMMIT reaches the primary and the standby, the primary dies before the answer), promotes the
standby, and checks the promoted server with raw SQL. The synchronous trial runs here; the
asynchronous one, which measures its loss window, in the slow profile:

    SESSIONSTATE_SLOW=1 ./dev test -q -m slow tests/multiproc/test_failover.py

The checks are pure functions of what the trial observed; the first tests feed them the
defects they are there to find (each one fails on its defect).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sessionstate import notice_text
from tests.multiproc.helpers import need_servers
from trials.failover import (
    INJECTED_TARGET,
    INJECTED_WATCHER,
    Acknowledged,
    Injected,
    Observed,
    allowed_repeats,
    check_events,
    check_injected,
    check_notices,
    longest_gap,
)

ROOT = Path(__file__).resolve().parents[2]
W, T = "agent:w:main", "agent:t:main"


def observed(**changes) -> Observed:
    """A clean trial's observations: three acknowledged events on T, one delivered notice
    whose reconciliation showed all three, every pair caught up."""
    base = dict(
        acknowledged=[Acknowledged(s, T, f"e{s}", 100.0 + s) for s in (2, 3, 4)],
        delivered=[notice_text(T, 1)],
        reconciled={T: {2, 3, 4}},
        events={1: (T, "created"), 2: (T, "e2"), 3: (T, "e3"), 4: (T, "e4"), 5: (INJECTED_TARGET, "injected")},
        notifying={2, 3, 4, 5},
        cursors={(W, T): (4, 4, 4), (INJECTED_WATCHER, INJECTED_TARGET): (5, 5, 5)},
        heads={T: 4, INJECTED_TARGET: 5},
        next_sequence=5,
    )
    base.update(changes)
    return Observed(**base)  # type: ignore[arg-type]


def test_a_clean_trial_passes_every_check() -> None:
    clean = observed()
    assert check_events(clean, synchronous=True) == ([], [], [])
    assert check_notices(clean, W, [T]) == []
    injected = Injected(expected=["line"], returned=["line"], again=[], outcome="unknown")
    assert check_injected(injected, clean) == []


def test_a_lost_acknowledged_event_fails_with_a_synchronous_standby_and_is_counted_with_an_asynchronous_one() -> None:
    lossy = observed(events={1: (T, "created"), 2: (T, "e2"), 3: (T, "e3")}, heads={T: 3},
                     cursors={(W, T): (3, 3, 3)}, reconciled={T: {2, 3}})
    failures, lost, _ = check_events(lossy, synchronous=True)
    assert failures == ["acknowledged event 4 (agent:t:main e4) is lost"] and [a.sequence for a in lost] == [4]
    failures, lost, _ = check_events(lossy, synchronous=False)
    assert failures == [] and [a.sequence for a in lost] == [4]


def test_a_reissued_sequence_and_a_sequence_behind_the_acknowledged_ones_fail() -> None:
    reissued = observed(events={1: (T, "created"), 2: (T, "e2"), 3: (T, "e3"), 4: (T, "someone else")})
    failures, lost, again = check_events(reissued, synchronous=True)
    assert lost == [] and len(again) == 1 and "acknowledged sequence 4" in failures[0]
    behind = observed(next_sequence=3)
    failures, _, _ = check_events(behind, synchronous=True)
    assert len(failures) == 1 and "would issue acknowledged sequences again" in failures[0]
    twice = observed(acknowledged=[Acknowledged(4, T, "e4", 1.0), Acknowledged(4, T, "e4", 2.0)])
    assert check_events(twice, synchronous=False)[0] == ["sequence 4 was acknowledged 2 times"]


def test_an_episode_delivered_twice_fails() -> None:
    failures = check_notices(observed(delivered=[notice_text(T, 1), notice_text(T, 1)]), W, [T])
    assert failures == [f"notice delivered 2 times: {notice_text(T, 1)}"]


def test_a_repeat_is_allowed_only_where_r29_allows_it() -> None:
    # A drain whose commit answer was lost and stayed unknown returns its lines; when that
    # commit had not reached the promoted server, the next drain delivers them again (at least
    # once). That repeat is counted apart; any other repeat, or a third delivery, fails.
    line = notice_text(T, 1)
    twice = observed(delivered=[line, line], uncertain={line})
    assert check_notices(twice, W, [T]) == []
    assert allowed_repeats(twice) == [f"notice delivered 2 times: {line}"]
    assert check_notices(observed(delivered=[line, line]), W, [T]) == [f"notice delivered 2 times: {line}"]
    thrice = observed(delivered=[line, line, line], uncertain={line})
    assert check_notices(thrice, W, [T]) == [f"notice delivered 3 times: {line}"]


def test_an_acknowledged_event_no_delivered_notice_showed_fails_as_a_lost_notice() -> None:
    # The drain that acknowledged 3 and 4 returned nothing: its reconciliation never happened.
    failures = check_notices(observed(reconciled={T: {2}}), W, [T])
    assert len(failures) == 1 and "[3, 4] (a notice lost)" in failures[0]
    # A log-only event (the session's creation, 1) is owed no notice.
    assert check_notices(observed(notifying={2, 3, 4}, reconciled={T: {2, 3, 4}}), W, [T]) == []


def test_a_pair_left_behind_its_head_fails() -> None:
    failures = check_notices(observed(cursors={(W, T): (3, 4, 4)}), W, [T])
    assert failures == ["agent:w:main -> agent:t:main is not caught up: (L, N, M) = (3, 4, 4), head 4"]


def test_the_injected_drain_must_return_its_lines_once_and_leave_its_pair_acknowledged() -> None:
    clean = observed()
    lost = check_injected(Injected(expected=["line"], returned=[], again=[], outcome="unknown"), clean)
    assert len(lost) == 1 and "a notice lost to an unknown outcome" in lost[0]
    repeated = check_injected(Injected(expected=["line"], returned=["line"], again=["line"]), clean)
    assert repeated == ["a later drain delivered the injected pair again: ['line']"]
    behind = observed(cursors={(W, T): (4, 4, 4), (INJECTED_WATCHER, INJECTED_TARGET): (0, 5, 5)})
    assert len(check_injected(Injected(expected=["line"], returned=["line"], again=[]), behind)) == 1


def test_the_injected_record_must_return_its_sequence_and_be_stored_once_under_it() -> None:
    from trials.failover import INJECTED_RECORD

    def stored(*sequences: int) -> Observed:
        events = {1: (T, "created"), 2: (T, "e2"), 3: (T, "e3"), 4: (T, "e4")}
        events.update({s: (INJECTED_TARGET, INJECTED_RECORD) for s in sequences})
        return observed(events=events)

    def record(sequence: int | None) -> Injected:
        return Injected(expected=["line"], kind="record", sequence=sequence)

    assert check_injected(record(6), stored(6)) == []
    # the drain's checks do not apply: no lines returned, the pair left owing
    assert check_injected(record(6), stored(6)) == check_injected(record(6), observed(
        events={**stored(6).events}, cursors={(INJECTED_WATCHER, INJECTED_TARGET): (0, 5, 5)})) == []
    assert check_injected(record(None), stored()) == [
        "the record whose commit answer was lost returned None (R29: its own rows decide)"]
    assert check_injected(record(6), stored()) == ["the injected record is stored as [], acknowledged as 6"]
    assert check_injected(record(6), stored(6, 7)) == ["the injected record is stored as [6, 7], acknowledged as 6"]
    assert check_injected(record(6), stored(8)) == ["the injected record is stored as [8], acknowledged as 6"]
    assert check_injected(record(None), stored(6)) == [
        "the record whose commit answer was lost returned None (R29: its own rows decide)",
        "the injected record is stored as [6], acknowledged as None"]


def test_the_trials_refuse_an_injection_they_do_not_know() -> None:
    from trials.failover import run_failover_trials

    with pytest.raises(ValueError, match="injections are drains and records"):
        run_failover_trials(1, injections=("attach",))
    with pytest.raises(ValueError, match="injections are drains and records"):
        run_failover_trials(1, injections=())


def test_longest_gap_is_the_writes_outage() -> None:
    assert longest_gap([3.0, 1.0, 1.5, 2.0]) == 1.0
    assert longest_gap([1.0]) == 0.0


# -- on two real servers ----------------------------------------------------------------------


def test_a_failover_to_a_synchronous_standby_under_load_loses_reissues_and_repeats_nothing() -> None:
    from trials.failover import run_failover_trials

    need_servers()
    report = run_failover_trials(1, "sync", seed=32)
    assert report.failures == [], report.summary()
    assert report.trials == 1 and report.acknowledged > 0 and report.delivered > 0
    assert report.lost == [] and report.reissued == []
    # The injected drain's commit is on the promoted server, on another timeline: its id's
    # status is only unknown there, its witness says committed (R29), and the drain returned
    # its lines (check_injected).
    assert report.injected_outcomes == ["drain committed"]


def test_a_record_whose_commit_answer_is_lost_in_a_failover_is_found_by_its_own_rows() -> None:
    """The injected transaction is a record: its id's status on the promoted server is only
    unknown (another timeline) and it writes no witness, so its own rows decide (R29). The
    standby had the commit: committed, the record returns its sequence, and the event is on
    the promoted server once, under that sequence (check_injected)."""
    from trials.failover import run_failover_trials

    need_servers()
    report = run_failover_trials(1, "sync", seed=33, injections=("record",))
    assert report.failures == [], report.summary()
    assert report.injected_outcomes == ["record committed"]


def test_the_failover_script_starts_a_pair_kills_the_primary_and_promotes_the_standby() -> None:
    need_servers()
    script = str(ROOT / "scripts" / "pg-failover-server")
    steps = ('"$0" status "$PG_FAILOVER_DIR"; "$0" failover "$PG_FAILOVER_DIR" 0.1;'
             ' "$0" status "$PG_FAILOVER_DIR"; echo "dir=$PG_FAILOVER_DIR"')
    done = subprocess.run([script, "run", "async", "bash", "-c", steps, script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:4] == ["primary: primary", "standby: standby", "primary: down", "standby: primary"], done.stdout
    directory = lines[4].removeprefix("dir=")
    assert directory and not Path(directory).exists(), "stop removed the servers' directory"


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("SESSIONSTATE_SLOW") != "1", reason="slow profile: SESSIONSTATE_SLOW=1")
def test_a_failover_to_an_asynchronous_standby_reports_its_loss_window() -> None:
    from trials.failover import run_failover_trials

    need_servers()
    report = run_failover_trials(5, "async", seed=33)
    print(report.summary())  # the measured window (docs/operations.md quotes it)
    # Loss and reissue are measured, not asserted; the notices are held to the same rules.
    assert report.failures == [], report.summary()
    assert report.trials == 5 and report.acknowledged > 0
    assert len(report.lost_before_kill_ms) == len(report.lost)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("SESSIONSTATE_SLOW") != "1", reason="slow profile: SESSIONSTATE_SLOW=1")
def test_the_trial_finds_a_drain_that_loses_its_lines_to_a_lost_commit_answer(monkeypatch) -> None:
    """The mutation the injected case is there for: a resolution that takes the injected
    drain for rolled back although the promoted server has its pairs acknowledged (a witness
    read wrongly; before R29, a drain that returned nothing) runs it again, and the second
    drain owes nothing: the lines are lost."""
    from sessionstate.store import commit_outcome
    from trials.failover import run_failover_trials

    need_servers()
    monkeypatch.setattr(commit_outcome, "witnessed", lambda *args: commit_outcome.ABORTED)
    report = run_failover_trials(1, "sync", seed=32)
    assert any("a notice lost to an unknown outcome" in f for f in report.failures), report.failures


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("SESSIONSTATE_SLOW") != "1", reason="slow profile: SESSIONSTATE_SLOW=1")
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_lost_standby_stalls_synchronous_commits_and_not_asynchronous_ones(mode: str) -> None:
    """The "standby lost" row of docs/operations.md: with the only synchronous standby gone a
    commit waits (it is on the primary, not acknowledged) until the standby is back or the
    operator drops the requirement; with an asynchronous one nothing changes."""
    import threading

    from sessionstate import Gateway
    from trials.pgpair import StreamingPair

    need_servers()
    with StreamingPair(mode) as pair:
        with Gateway.open(pair.url) as gw:
            gw.create_session(T)
            pair.kill_standby()
            answers: list[int | None] = []
            appending = threading.Thread(target=lambda: answers.append(
                gw.record_event(T, "human_direct_message", actor_type="human", summary="while alone")))
            appending.start()
            appending.join(3.0)
            if mode == "async":
                assert answers and answers[0] is not None, "an asynchronous primary does not wait"
                return
            assert answers == [], "the commit waits for the lost synchronous standby"
            pair.sql(pair.primary_dir, "ALTER SYSTEM SET synchronous_standby_names = ''")
            pair.sql(pair.primary_dir, "SELECT pg_reload_conf()")
            appending.join(30.0)
            assert answers and answers[0] is not None, "acknowledged once the requirement is dropped"
