"""``./dev trials --only failover``: the part's wiring (what it prints, that a finding
fails the check, the modes it runs, a missing server) with the trial replaced by a recorded
report, and the real trial end to end in the slow profile:

    SESSIONSTATE_SLOW=1 ./dev test -q -m slow tests/trials/test_failover_trial.py
"""

from __future__ import annotations

import io
import os

import pytest

from trials import failover, pgserver, runner


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = runner.run_trials(runner.parser().parse_args(argv), out)
    return code, out.getvalue()


@pytest.fixture
def recorded(monkeypatch) -> list[tuple[int, str]]:
    """The trials replaced by a report per mode; the calls made (trials, mode)."""
    calls: list[tuple[int, str]] = []
    monkeypatch.setattr(runner, "_missing_postgres", lambda *a, **k: None)

    def trials(count: int, mode: str, **_: object) -> failover.FailoverReport:
        calls.append((count, mode))
        report = failover.FailoverReport(mode, trials=count, acknowledged=10, delivered=3)
        report.injected_outcomes.append("unknown")
        if mode == "async":
            report.lost.append(failover.Acknowledged(7, "agent:t:main", "w1-7", 1.0))
            report.lost_before_kill_ms.append(4.5)
        return report

    monkeypatch.setattr(failover, "run_failover_trials", trials)
    return calls


def test_the_failover_part_reports_each_mode_and_its_loss_window(recorded) -> None:
    code, text = run(["--fast", "--only", "failover", "--failover-modes", "sync,async", "--failover-trials", "2"])
    assert code == 0, text  # an asynchronous standby's loss is reported, not failed
    assert recorded == [(2, "sync"), (2, "async")]
    assert "failover (sync standby): 2 sync failover(s), 10 acknowledged appends (none lost)" in text
    assert "failover (async standby): 2 async failover(s), 10 acknowledged appends (1 lost, acknowledged up to" \
           " 4.5 ms before the kill)" in text
    assert "all trials passed" in text


def test_a_failover_finding_fails_the_check_with_its_replay_command(recorded, monkeypatch) -> None:
    def failing(count: int, mode: str, **_: object) -> failover.FailoverReport:
        return failover.FailoverReport(mode, trials=1, failures=["trial 0: acknowledged event 4 is lost"])

    monkeypatch.setattr(failover, "run_failover_trials", failing)
    code, text = run(["--fast", "--only", "failover"])
    assert code == 1, text
    assert "failover (sync): trial 0: acknowledged event 4 is lost" in text
    assert "replay: ./dev trials --only failover --failover-modes sync --seed 0" in text


def test_the_profiles_choose_the_modes(recorded) -> None:
    run(["--fast", "--only", "failover"])
    run(["--only", "failover", "--failover-trials", "1"])
    assert recorded == [(1, "sync"), (1, "sync"), (1, "async")]
    code, text = run(["--fast", "--only", "failover", "--failover-modes", "semi"])
    assert code == 1 and "unknown standby mode(s) ['semi']" in text


def test_without_server_binaries_the_part_asked_for_fails_and_the_default_run_skips_it(monkeypatch) -> None:
    monkeypatch.setattr(pgserver, "server_binaries", lambda: None)
    code, text = run(["--fast", "--only", "failover"])
    assert code == 1 and "failover: skipped (no PostgreSQL server binaries" in text
    said: list[str] = []
    assert runner._failover(dict(runner.FAST), 0, said.append, required=False) == []  # a plain `check`
    assert said and said[0].startswith("failover: skipped (no PostgreSQL server binaries")


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("SESSIONSTATE_SLOW") != "1", reason="slow profile: SESSIONSTATE_SLOW=1")
def test_check_failover_runs_a_real_synchronous_failover() -> None:
    from tests.multiproc.helpers import need_servers

    need_servers()
    code, text = run(["--fast", "--only", "failover"])
    assert code == 0, text
    assert "failover (sync standby): 1 sync failover(s)" in text and "(none lost)" in text
