"""The nemesis (trials/nemesis.py): the short CI schedule passes on both backends, and each
known fault-handling bug seeded back into the workers (trials/nemesis_bugs.py) fails it with
the seed and the command that replays it.

The PostgreSQL cases run on a throwaway server of their own (it is restarted, and reached
through the commit-dropping proxy), not on the suite's server; like every PostgreSQL test they
skip where the suite has no PostgreSQL half (``SESSIONSTATE_TEST_PG=off``). Each run's
histories, traces and report.json are kept in ``$SESSIONSTATE_NEMESIS_KEEP/<test>`` when that
is set (CI's artefacts), else in pytest's temporary directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.backends import PG_URL_ENV, SKIP_REASON, need_psycopg, skip_or_fail_without_postgres
from trials.nemesis import PROBE_CALM_SECONDS, NemesisReport, Settings, make_schedule, run_nemesis
from trials.nemesis_bugs import BACKENDS as BUG_BACKENDS
from trials.pgserver import server_binaries

SEED = 1  # the fixed CI seed: every short schedule holds a stall, a kill and lost drain answers
SECONDS = 15.0  # the short schedule's faults; the seeded bugs run the very same schedule


def need_backend(backend: str) -> None:
    if backend == "sqlite":
        return
    if not os.environ.get(PG_URL_ENV):  # the suite's PostgreSQL half is off: so is this one
        skip_or_fail_without_postgres(SKIP_REASON)
    if server_binaries() is None:
        skip_or_fail_without_postgres("no PostgreSQL server binaries (apt-get install postgresql)")
    need_psycopg()


def keep_dir(tmp_path: Path, name: str) -> Path:
    base = os.environ.get("SESSIONSTATE_NEMESIS_KEEP")
    return Path(base) / name if base else tmp_path / "nemesis"


def run(backend: str, seconds: float, tmp_path: Path, name: str, bug: str | None = None) -> NemesisReport:
    need_backend(backend)
    return run_nemesis(SEED, Settings(backend=backend, seconds=seconds, bug=bug), keep=keep_dir(tmp_path, name))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_short_nemesis_schedule_loses_and_repeats_nothing_and_heals_within_its_bound(backend, tmp_path):
    report = run(backend, SECONDS, tmp_path, f"short-{backend}")
    assert report.ok, report.failure_text()
    assert report.faults["stall"] >= 1 and report.faults["kill"] >= 1, report.table()
    assert report.takeovers >= 1, report.table()  # R20 was exercised: a stalled worker's watchers moved
    if backend == "postgres":
        assert report.faults["lose-commit"] >= 2 and report.commits_cut >= 1, report.table()
        assert sum(report.resolutions.values()) >= 1, report.table()
    else:  # the merged protocol trace was replayed against the spec; the disk filled up
        assert "replayed OK" in report.trace, report.trace
        # (a full disk needs a tmpfs mounted: as root; elsewhere the fault is skipped, and said so)
        assert report.faults["full"] >= 1 or (os.geteuid() != 0 and report.skipped["full"] >= 1), report.table()
    assert report.acknowledged > 100 and report.delivered > 10, report.table()
    assert report.lost == 0 and report.duplicated == 0
    assert report.heal_seconds is not None and report.heal_bound is not None
    assert report.heal_seconds <= report.heal_bound
    assert (keep_dir(tmp_path, f"short-{backend}") / "report.json").exists()


# The rules each seeded bug breaks, as the verdict names them (any one suffices).
CAUGHT_BY = {"stalled-claim": ("R20",), "guessed-drain": ("INV10", "R20"), "notify-rides": ("R22",)}


@pytest.mark.parametrize("bug", sorted(CAUGHT_BY))
def test_a_seeded_fault_handling_bug_fails_the_short_schedule_with_a_replayable_seed(bug, tmp_path):
    backend = BUG_BACKENDS[bug][0]
    report = run(backend, SECONDS, tmp_path, f"bug-{bug}", bug=bug)
    assert not report.ok, f"the nemesis missed the seeded bug {bug}:\n{report.table()}"
    rules = {finding.split(":")[0] for finding in report.findings}
    assert rules & set(CAUGHT_BY[bug]), report.failure_text()
    text = report.failure_text()
    assert f"schedule (seed {SEED}):" in text
    assert re.search(rf"replay: ./dev trials --only nemesis --seed {SEED} --nemesis-backend {backend} "
                     rf"--nemesis-seconds {SECONDS:g} .* --nemesis-bug {bug}$", text), text


def test_a_schedule_is_a_function_of_its_seed_and_holds_the_faults_ci_relies_on():
    for backend in ("sqlite", "postgres", "pgpair"):
        settings = Settings(backend=backend, seconds=SECONDS)
        first = make_schedule(SEED, settings)
        assert first == make_schedule(SEED, settings)
        kinds = [f.kind for f in first]
        assert "stall" in kinds and "kill" in kinds
        assert all(f.at < settings.seconds for f in first)
        assert all(f.at + f.seconds <= settings.seconds for f in first if f.kind == "stall")
        # R20's probe: the last stall, between transactions, with nobody killed or stalled after
        # its start minus the calm (so its takers live to the verdict)
        probe = [f for f in first if f.kind in ("kill", "stall")][-1]
        assert probe.kind == "stall" and probe.mode == "probe"
        assert all(f.at <= probe.at - PROBE_CALM_SECONDS for f in first if f.kind in ("kill", "stall") and f != probe)
        if backend != "sqlite":
            modes = {f.mode for f in first if f.kind == "lose-commit"}
            assert {"before drain", "after drain"} <= modes
        assert ("failover" in kinds) == (backend == "pgpair")
        assert ("full" in kinds) == (backend == "sqlite")
    assert make_schedule(2, Settings()) != make_schedule(SEED, Settings())


def test_the_runner_part_prints_the_table_and_a_finding_with_its_replay_command(monkeypatch, tmp_path):
    import io

    from trials import nemesis, runner

    calls: list[tuple[int, Settings]] = []

    def recorded(seed: int, settings: Settings, **_: object) -> NemesisReport:
        calls.append((seed, settings))
        report = NemesisReport(seed, settings, acknowledged=40, delivered=5, heal_seconds=1.5, heal_bound=8.0)
        report.faults.update({"stall": 1, "kill": 2})
        report.operations.update({"drain": 3})
        if settings.backend == "postgres":
            report.findings.append("INV10: agent:n0:main was delivered 2 times: a line")
        return report

    monkeypatch.setattr(nemesis, "run_nemesis", recorded)
    monkeypatch.setattr(runner, "_missing_postgres", lambda *a, **k: None)
    out = io.StringIO()
    code = runner.run_trials(runner.parser().parse_args(
        ["--fast", "--only", "nemesis", "--seed", "7", "--nemesis-keep", str(tmp_path)]), out)
    text = out.getvalue()
    assert code == 1, text
    assert [(seed, s.backend, s.seconds, s.lease) for seed, s in calls] == [(7, "sqlite", 20.0, 3.0),
                                                                            (7, "postgres", 20.0, 3.0)]
    assert "nemesis (sqlite): sqlite, 3 gateway processes, 20s of faults: 3 operations, 3 faults, 40 acknowledged," \
           " 0 lost, 0 duplicated" in text
    assert "faults: kill" in text and "time to heal (s)" in text
    assert "nemesis (postgres): INV10: agent:n0:main was delivered 2 times" in text
    assert "replay: ./dev trials --only nemesis --seed 7 --nemesis-backend postgres --nemesis-seconds 20" \
           " --nemesis-lease 3 --nemesis-heartbeat 1 --nemesis-window 2" in text
    before = len(calls)
    args = runner.parser().parse_args(["--only", "nemesis", "--nemesis-backends", "oracle"])
    assert runner.run_trials(args, out) == 1 and "unknown backend(s) ['oracle']" in out.getvalue()
    assert len(calls) == before  # nothing ran


def test_full_disk_faults_that_overlap_take_turns(tmp_path):
    import threading
    from types import SimpleNamespace

    from trials.full_disk import BALLAST, mount_tmpfs, unmount
    from trials.nemesis import Fault, Injector

    disk = tmp_path / "disk"
    disk.mkdir()
    if not mount_tmpfs(disk, "1m"):
        pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
    try:
        report = NemesisReport(SEED, Settings())
        injector = Injector(SimpleNamespace(), SimpleNamespace(disk=disk), Settings(), report)
        faults = [Fault(0.0, "full", seconds=0.3), Fault(0.1, "full", seconds=0.3)]
        threads = [threading.Thread(target=injector._inject, args=(f,)) for f in faults]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert report.findings == [] and report.faults["full"] == 2
        assert not (disk / BALLAST).exists()
    finally:
        unmount(disk)
