"""The Promela model: generated from the one table, its effect inlines equal to the Python
effects, verified by SPIN for one and two processes, seeded bugs found, trails replayed on
real gateways.

SPIN runs skip with a one-line reason when ``spin`` (or ``gcc``) is missing, except in CI
(``SESSIONSTATE_REQUIRE_SPIN=1``, set by ``.ci/run``, or ``CI=true``), where they fail.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sessionstate.statemachine.effects import EFFECT_FUNCTIONS
from sessionstate.statemachine.table import (
    CAUGHT_UP,
    DRAIN,
    EFFECT_FREEZE,
    EFFECT_SEED,
    EFFECTS,
    MATERIAL_EVENT,
    NOTICE_PENDING,
    PENDING_WITH_MORE,
    SELF_EVENT,
    TRANSITIONS,
    Transition,
)
from sessionstate.verify import promela, world
from sessionstate.verify.promela import Mutation, generate
from sessionstate.verify.spin import (
    BOUNDS,
    SpinReport,
    replay_trail,
    run_spin,
    trail_actions,
    trail_steps,
    trail_wakes,
)
from tests.verify.helpers import REQUIRE_SPIN_ENV, need_spin, table_with

BOUND = 3  # positions and sequences 0..BOUND in the differential test


# -- generated from the table --------------------------------------------------------------------


def test_the_committed_model_is_generated_from_the_table():
    assert promela.SPEC_PATH.read_text() == generate(), (
        "spec/notice-protocol.pml is stale: run `sessionstate model --promela --write spec/notice-protocol.pml`"
    )


def test_a_change_to_the_table_changes_the_model():
    changed = tuple(Transition(t.source, t.trigger, CAUGHT_UP, EFFECT_SEED) if (t.source, t.trigger) ==
                    (PENDING_WITH_MORE, DRAIN) else t for t in TRANSITIONS)
    model = generate(changed)
    assert model != promela.SPEC_PATH.read_text()
    assert "NEXT[PENDING_WITH_MORE * NTRIG + T_DRAIN] = CAUGHT_UP; EFF[PENDING_WITH_MORE * NTRIG + T_DRAIN] = E_SEED;" in model
    dropped = tuple(t for t in TRANSITIONS if (t.source, t.trigger) != (NOTICE_PENDING, DRAIN))
    assert "NOTICE_PENDING * NTRIG + T_DRAIN" not in generate(dropped)


def test_the_ambient_pairs_come_from_the_explorers_world(monkeypatch):
    """A's cursor on C is queue-only (R26) in the model because world.AMBIENT says so."""
    model = generate()
    ambient = [i for i, pair in enumerate(world.PAIRS) if pair in world.AMBIENT]
    assert ambient == [world.PAIRS.index(("A", "C"))]
    for i in range(len(world.PAIRS)):
        assert f"AMB[{i}] = {int(i in ambient)};" in model
    monkeypatch.setattr(promela, "AMBIENT", frozenset())
    assert all(f"AMB[{i}] = 0;" in generate() for i in range(len(world.PAIRS)))


def test_an_effect_without_an_inline_is_refused():
    with pytest.raises(ValueError, match="without a Promela inline"):
        generate(TRANSITIONS + (Transition(CAUGHT_UP, DRAIN, CAUGHT_UP, "advance_to_head"),))


# -- the effect inlines against the Python effects ----------------------------------------------


def _harness(inlines: dict[str, str]) -> str:
    """Every effect inline on every (L, N, M, s) up to BOUND, and on a pair with no cursor."""
    lines = ["#define NONE 255", "bool watched[1]; byte L[1]; byte N[1]; byte M[1]; byte opened;",
             promela.PROMELA_SCRATCH]
    lines += [f"inline eff_{name}(p, s) {{\n  {inlines[name]}\n}}" for name in EFFECTS]
    lines += ["init {", "  byte a; byte b; byte c; byte s;",
              f"  for (a : 0 .. {BOUND}) {{ for (b : 0 .. {BOUND}) {{ for (c : 0 .. {BOUND}) {{ for (s : 0 .. {BOUND}) {{"]
    for name in EFFECTS:
        lines.append(f"    watched[0] = 1; L[0] = a; N[0] = b; M[0] = c; eff_{name}(0, s);"
                     f' printf("R {name} %d %d %d %d %d %d %d %d %d\\n", a, b, c, s, watched[0], L[0], N[0], M[0], opened);')
    lines.append("  } } } };")
    for name in EFFECTS:
        lines.append(f"  for (s : 0 .. {BOUND}) {{ watched[0] = 0; L[0] = 0; N[0] = 0; M[0] = 0; eff_{name}(0, s);"
                     f' printf("U {name} %d %d %d %d %d %d\\n", s, watched[0], L[0], N[0], M[0], opened) }};')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _python_lines() -> set[str]:
    out = set()
    for name in EFFECTS:
        effect = EFFECT_FUNCTIONS[name]
        for a in range(BOUND + 1):
            for b in range(BOUND + 1):
                for c in range(BOUND + 1):
                    for s in range(BOUND + 1):
                        positions, notice = effect((a, b, c), s)
                        got = (1, *positions) if positions is not None else (0,)
                        out.add(f"R {name} {a} {b} {c} {s} {_shown(got)} {255 if notice is None else notice}")
        for s in range(BOUND + 1):
            try:
                positions, notice = effect(None, s)
            except AssertionError:
                continue  # the effect needs a cursor: the table never fires it on an unwatched pair
            got = (1, *positions) if positions is not None else (0,)
            out.add(f"U {name} {s} {_shown(got)} {255 if notice is None else notice}")
    return out


def _shown(got: tuple) -> str:
    # A pair without a cursor shows watched 0; its positions in the model are then meaningless.
    return " ".join(map(str, got)) if got[0] else "0 * * *"


def _spin_lines(inlines: dict[str, str], tmp_path: Path) -> set[str]:
    (tmp_path / "harness.pml").write_text(_harness(inlines))
    out = subprocess.run(["spin", "harness.pml"], cwd=tmp_path, capture_output=True, text=True, timeout=300).stdout
    lines = set()
    for raw in out.splitlines():
        parts = raw.split()
        if not parts or parts[0] not in ("R", "U"):
            continue
        head = 6 if parts[0] == "R" else 3
        if parts[head] == "0":
            parts[head + 1: head + 4] = ["*", "*", "*"]
        lines.add(" ".join(parts))
    return lines


def _differences(inlines: dict[str, str], tmp_path: Path) -> set[str]:
    python, model = _python_lines(), _spin_lines(inlines, tmp_path)
    # On a pair without a cursor only the effects the table can fire there are compared.
    unwatched = {line.split()[1] for line in python if line.startswith("U ")}
    model = {line for line in model if line.startswith("R ") or line.split()[1] in unwatched}
    return python ^ model


def test_every_effect_inline_equals_its_python_effect(tmp_path):
    need_spin()
    python = _python_lines()
    assert len([line for line in python if line.startswith("R ")]) == len(EFFECTS) * (BOUND + 1) ** 4
    assert _differences(promela.EFFECT_INLINES, tmp_path) == set()


def test_the_differential_test_sees_a_wrong_inline(tmp_path):
    need_spin()
    broken = dict(promela.EFFECT_INLINES, ack="opened = NONE; L[p] = M[p]; N[p] = M[p]")  # acks to the head
    # (the renderer's own bug: both sides come from statemachine/effectdata.py)
    differences = _differences(broken, tmp_path)
    assert differences and all(" ack " in line for line in differences)


# -- SPIN on the model ---------------------------------------------------------------------------


def _report(report: SpinReport) -> str:
    return f"SPIN, {report.processes} process(es), {report.bounds}, built in {report.build_seconds:.1f}s:\n  " + \
        "\n  ".join(r.line() for r in report.runs)


@pytest.mark.parametrize("processes", [1, 2])
def test_spin_verifies_the_generated_model(processes, tmp_path):
    need_spin()
    report = run_spin(promela.SPEC_PATH.read_text(), processes, BOUNDS[processes], workdir=tmp_path)
    print(_report(report))
    assert [r.prop for r in report.runs] == ["safety", "LIV1", "LIV2"]
    failed = report.failed
    assert failed is None, f"{failed.prop} failed:\n{failed.output[-3000:]}\n{trail_steps(report)}"
    assert all(r.states > 100 and r.depth > 0 for r in report.runs)


INV6_ACKED = "assertion violated ((owed[pc]&((2<<L[pc])-1))==0)"  # an owed event acknowledged uncovered
# name: (table, world mutation, processes, what pan must report)
MUTATIONS = {
    # R8: the drain acknowledges to the head instead of the frozen watermark (no reopen).
    "drop_reopen_on_drain": (table_with({(PENDING_WITH_MORE, DRAIN): (CAUGHT_UP, EFFECT_SEED)}), Mutation(), 1,
                             INV6_ACKED),
    # R6: a later material event moves the frozen watermark.
    "freeze_n_at_the_wrong_place": (table_with({(NOTICE_PENDING, MATERIAL_EVENT): (NOTICE_PENDING, EFFECT_FREEZE),
                                           (PENDING_WITH_MORE, MATERIAL_EVENT): (NOTICE_PENDING, EFFECT_FREEZE)}),
                                    Mutation(), 1, INV6_ACKED),
    # R2: a self-caused event opens a notice.
    "skip_self_suppression": (table_with({(CAUGHT_UP, SELF_EVENT): (NOTICE_PENDING, EFFECT_FREEZE)}), Mutation(), 1,
                              "assertion violated (opened==255)"),  # INV5
    "wake_sub_agents": (TRANSITIONS, Mutation(wake_subagents=True), 1, "assertion violated MAIN["),  # R12
    "deliver_from_the_queue_without_the_cursor": (TRANSITIONS, Mutation(queue_only_drain=True), 2,
                                                  "assertion violated ((watched[pd]&&(L[pd]!=N[pd]))"),  # INV10
    "forget_the_owed_wake": (TRANSITIONS, Mutation(forget_owed_wake=True), 1, "acceptance cycle"),
    # R26: A's ambient cursor on C wakes A (or is owed a wake) like an explicit one.
    "ambient_wakes": (TRANSITIONS, Mutation(ambient_wakes=True), 1, "!(AMB["),  # INV12
}


def _mutant_report(name: str, tmp_path: Path) -> SpinReport:
    table, mutation, processes, _ = MUTATIONS[name]
    return run_spin(generate(table, mutation), processes, BOUNDS[processes], properties=("LIV1", "LIV2"),
                    workdir=tmp_path)


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_spin_finds_each_seeded_bug(name, tmp_path):
    need_spin()
    report = _mutant_report(name, tmp_path)
    print(_report(report))
    failed = report.failed
    assert failed is not None, f"SPIN missed the mutation {name}"
    assert MUTATIONS[name][3] in failed.output
    assert (tmp_path / "model.pml.trail").exists()


def test_spin_finds_the_stranded_notice_of_an_attach_that_keeps_a_held_notice(tmp_path):
    """The hole SPIN found in the first model: A is woken from process 1, process 1 restarts
    (the wake is lost with it), A is attached back to process 0, which still holds A's notice
    from before that wake; nothing wakes A again. LIV2 fails; the attach that re-enters the
    notice (the committed model) passes (test_spin_verifies_the_generated_model)."""
    need_spin()
    assert BOUNDS[2]["STEPS"] >= 4  # CI's own two-process bound finds it
    report = run_spin(generate(mutation=Mutation(attach_keeps_held=True)), 2, BOUNDS[2],
                      properties=("LIV2",), workdir=tmp_path)
    print(_report(report))
    assert report.failed is not None and "acceptance cycle" in report.failed.output
    actions = [a for a, _ in trail_actions(trail_steps(report), 2) if a is not None]
    assert ("restart", 1) in actions and ("attach", "A", 0) in actions


# -- trails on real gateways ---------------------------------------------------------------------


def test_a_counterexample_trail_replays_on_the_real_gateway(tmp_path):
    """The model with R8 broken acknowledges past an interleaved event; the same steps on the
    real store agree with the model up to that drain and keep the event there (the real
    gateway reopens the notice), and the protocol trace they write passes the checker."""
    need_spin()
    report = _mutant_report("drop_reopen_on_drain", tmp_path / "spin")
    steps = trail_actions(trail_steps(report), 1)
    assert any(a is not None and a[0] == "drain" for a, _ in steps)
    replayed = replay_trail(steps, 1, tmp_path / "real")
    assert replayed.steps > 0
    assert replayed.differences, "the real gateway did what the broken model did"
    first = replayed.differences[0]
    assert "'drain'" in first, first
    assert replayed.trace.stat().st_size > 0
    assert replayed.trace_violation is None, replayed.trace_violation


# A state the correct model reaches only through a drain's follow-up (pending_with_more, then
# drain): the witness trail must replay on real gateways with equal positions all along.
WITNESS = "ltl WITNESS { [] !(watched[0] && L[0] == 1 && N[0] == 2 && M[0] == 2) }\n"


@pytest.mark.parametrize("processes", [1, 2])
def test_a_trail_of_the_correct_model_replays_equal_on_real_gateways(processes, tmp_path):
    need_spin()
    report = run_spin(promela.SPEC_PATH.read_text() + WITNESS, processes, BOUNDS[processes],
                      properties=("WITNESS",), workdir=tmp_path / "spin")
    assert report.failed is not None, "SPIN found no run to the witness state"
    printed = trail_steps(report)
    steps = trail_actions(printed, processes)
    replayed = replay_trail(steps, processes, tmp_path / "real", trail_wakes(printed))
    assert replayed.steps >= 3
    assert replayed.differences == []
    assert replayed.trace_violation is None, replayed.trace_violation
    assert steps[-1][1] is not None and steps[-1][1][0] == (1, 2, 2)
    # The trail wakes A (its first event, then R23's re-wake after the window): the real
    # gateways send the same wakes from the same processes in the same steps.
    assert replayed.model_wakes >= 2
    assert replayed.wake_differences == []


def test_a_forgotten_owed_wake_is_a_wake_the_real_gateway_sends(tmp_path):
    """The model that drops a wake suppressed inside the window (LIV1's acceptance cycle):
    replayed on the real gateway, the window's end fires the owed wake the model forgot."""
    need_spin()
    report = _mutant_report("forget_the_owed_wake", tmp_path / "spin")
    printed = trail_steps(report)
    replayed = replay_trail(trail_actions(printed, 1), 1, tmp_path / "real", trail_wakes(printed))
    assert replayed.differences == []  # the positions agree: only the wake is missing
    assert replayed.wake_differences, "the real gateway sent no wake the model did not"
    assert "the window passes" in replayed.wake_differences[0]
    assert "processes [0] for real, [] in the model" in replayed.wake_differences[0]


# -- CI never passes with SPIN skipped ----------------------------------------------------------


def test_a_missing_spin_skips_locally(monkeypatch):
    from sessionstate.verify import spin

    monkeypatch.delenv(REQUIRE_SPIN_ENV, raising=False)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(spin.shutil, "which", lambda tool: None)
    with pytest.raises(pytest.skip.Exception, match="spin is not installed"):
        need_spin()


@pytest.mark.parametrize("variable", [REQUIRE_SPIN_ENV, "CI"])
def test_a_missing_spin_fails_in_ci(monkeypatch, variable):
    from sessionstate.verify import spin

    monkeypatch.setenv(variable, "true" if variable == "CI" else "1")
    monkeypatch.setattr(spin.shutil, "which", lambda tool: None)
    with pytest.raises(pytest.fail.Exception, match="required here"):
        need_spin()


def test_ci_installs_spin_and_requires_it():
    script = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert "apt-get install -y -q spin gcc" in script and "SESSIONSTATE_REQUIRE_SPIN=1" in script


def test_the_model_command_prints_and_writes_the_generated_model(tmp_path, capsys):
    from sessionstate.clients.cli import main

    assert main(["model", "--promela"]) == 0
    assert capsys.readouterr().out == generate()
    target = tmp_path / "m.pml"
    assert main(["model", "--promela", "--write", str(target)]) == 0
    assert target.read_text() == promela.SPEC_PATH.read_text()
