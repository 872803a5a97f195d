"""``sessionstate check`` runs end to end, reports, and fails loudly."""

from __future__ import annotations

import io
import tempfile

from sessionstate.clients.cli import build_parser
from sessionstate.verify import runner


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = runner.run_check(build_parser().parse_args(["check", "--report-dir", tempfile.mkdtemp(prefix="sessionstate-reports-"), *argv]), out)
    return code, out.getvalue()


def test_fast_profile_end_to_end_report():
    code, text = run(["--fast", "--depth", "3", "--processes-depth", "2", "--replay", "5", "--budget", "2"])
    assert code == 0, text
    for needle in ("model check:", "states", "model check, two processes: 225 states",
                   "two-process real-store replay: 5 traces on two gateways, all equal", "real-store replay: 5 traces", "fuzz: 2 examples",
                   "all checks passed"):
        assert needle in text


def test_a_failure_exits_non_zero_with_a_replay_command(monkeypatch):
    from sessionstate.verify import machinepath

    def prune_without_write_back(self):  # R13 broken on purpose
        oldest = self.events.pop(0)
        self.pruned[oldest[1]] = max(self.pruned[oldest[1]], oldest[0])
        return oldest

    monkeypatch.setattr(machinepath.MachWorld, "prune", prune_without_write_back)
    code, text = run(["--fast", "--only", "modelcheck", "--depth", "4"])
    assert code == 1
    assert "counter-example (4 steps" in text and "replay: sessionstate check --only modelcheck" in text


def test_a_two_process_failure_exits_non_zero_with_a_replay_command(monkeypatch):
    from sessionstate.verify import machinepath

    def sweep_that_queues_nothing(self, process):  # R22 broken on purpose
        self.views[process] = dict(self.claims)

    monkeypatch.setattr(machinepath.SharedMachWorld, "sweep", sweep_that_queues_nothing)
    code, text = run(["--fast", "--only", "modelcheck", "--depth", "1", "--processes-depth", "3", "--replay", "0"])
    assert code == 1, text
    assert "model check, two processes:\ncounter-example" in text and "--processes-depth" in text


def test_check_spin_verifies_the_model_for_one_and_two_processes():
    from tests.verify.helpers import need_spin

    need_spin()
    code, text = run(["--fast", "--only", "spin"])
    assert code == 0, text
    for processes in (1, 2):
        for prop in ("safety", "LIV1", "LIV2"):
            assert f"spin, {processes} process(es), " in text and f"{prop}: " in text
    assert "errors 0" in text and "errors 1" not in text and "all checks passed" in text


def test_check_spin_fails_with_the_trail_when_the_model_is_broken(monkeypatch, tmp_path):
    from sessionstate.statemachine.table import CAUGHT_UP, DRAIN, EFFECT_SEED, PENDING_WITH_MORE
    from sessionstate.verify import promela
    from tests.verify.helpers import need_spin, table_with

    need_spin()
    # R8 broken (test_promela's "drop_reopen_on_drain"): the drain acknowledges to the head.
    table, mutation = table_with({(PENDING_WITH_MORE, DRAIN): (CAUGHT_UP, EFFECT_SEED)}), promela.Mutation()
    real_generate = promela.generate
    broken = real_generate(table, mutation)
    # --spin checks the committed file and refuses one that differs from what the code
    # generates: here both are the broken model.
    (tmp_path / "notice-protocol.pml").write_text(broken)
    monkeypatch.setattr(promela, "SPEC_PATH", tmp_path / "notice-protocol.pml")
    monkeypatch.setattr(promela, "generate", lambda: broken)
    code, text = run(["--fast", "--only", "spin"])
    assert code == 1, text
    assert "safety failed; trail in" in text and "('drain', 'A')" in text and "spin -t -DPROCS=1" in text
    assert "real gateways: the real store differs from the model: step" in text and "passes `sessionstate replay`" in text


def test_check_spin_without_spin_is_a_failure_not_a_pass(monkeypatch):
    from sessionstate.verify import spin

    monkeypatch.setattr(spin.shutil, "which", lambda tool: None)
    code, text = run(["--fast", "--only", "spin"])
    assert code == 1
    assert "spin: spin is not installed" in text
