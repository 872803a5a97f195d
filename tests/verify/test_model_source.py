"""One source for the effects: ``statemachine/effectdata.py`` compiles into the Python the hot
path calls and renders into the Promela SPIN checks; a bug seeded in that data, in a table
row, or in the world in a way only a property's own ghost sees, makes SPIN report a
counterexample on the regenerated model. ``sessionstate check --spin`` checks the committed
model and refuses one that differs from what the code generates.

SPIN runs skip (or fail in CI) as in test_promela.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sessionstate.statemachine import effects
from sessionstate.statemachine.effectdata import EFFECT_DATA, EffectSpec, promela_inline
from sessionstate.statemachine.table import (
    CAUGHT_UP,
    DRAIN,
    EFFECT_ACK,
    EFFECT_RAISE_MATERIAL,
    EFFECT_SWEEP,
    EFFECTS,
    EVENT_KINDS,
    PENDING_WITH_MORE,
    TRANSITIONS,
    KindPolicy,
    Transition,
)
from sessionstate.verify import promela, runner
from sessionstate.verify.promela import Mutation, generate
from sessionstate.verify.promela_kinds import spec_kinds
from sessionstate.verify.spin import BOUNDS, SpinReport, run_spin
from tests.verify.helpers import need_spin

# -- one source ----------------------------------------------------------------------------------


def test_every_python_effect_is_compiled_from_the_data():
    assert set(EFFECT_DATA) == set(EFFECTS) == set(effects.EFFECT_FUNCTIONS)
    for name, function in effects.EFFECT_FUNCTIONS.items():
        assert function.__code__.co_filename == f"<effect {name}>"  # not a hand-written def
        assert function is getattr(effects, name)


def test_a_change_to_the_data_changes_both_the_python_and_the_promela():
    broken = dict(EFFECT_DATA, ack=EFFECT_DATA[EFFECT_ACK]._replace(L="M"))  # acknowledges to the head
    python = effects.compile_effects(broken)[EFFECT_ACK]
    assert python((1, 2, 4), None)[0] == (4, 4, 4) != effects.ack((1, 2, 4), None)[0]
    model = generate(effects=broken)
    assert "eL = M[p]" in model and model != promela.SPEC_PATH.read_text()
    assert promela.effect_inlines(broken)[EFFECT_ACK] == promela_inline(EFFECT_ACK, broken[EFFECT_ACK])


@pytest.mark.parametrize("spec, message", [
    (EffectSpec("update", L="X"), "unknown name"),
    (EffectSpec("update", L=("min", "L", "N")), "unknown expression"),
    (EffectSpec("create", L="N"), "reads the old positions"),
    (EffectSpec("keep", opened="L"), "assigns nothing"),
    (EffectSpec("teleport"), "unknown cursor action"),
])
def test_an_effect_the_compilers_cannot_render_is_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        effects.compile_effects({"bad": spec})
    with pytest.raises(ValueError, match=message):
        promela_inline("bad", spec)


# -- seeded bugs: SPIN finds each on the regenerated model ---------------------------------------


def _row(source: str, trigger: str, dest: str, effect: str) -> tuple[Transition, ...]:
    return tuple(Transition(source, trigger, dest, effect) if (t.source, t.trigger) == (source, trigger) else t
                 for t in TRANSITIONS)


def _data(name: str, **changes) -> dict[str, EffectSpec]:
    return dict(EFFECT_DATA, **{name: EFFECT_DATA[name]._replace(**changes)})


# name: (table, effects, world mutation, processes, properties, what pan must report)
SEEDED = {
    # R8: the drain forgets the follow-up notice for interleaved work.
    "ack_without_reopen": (TRANSITIONS, _data(EFFECT_ACK, opened=None), Mutation(), 1, ("safety",),
                           "assertion violated"),
    # R11: the restart sweep queues the frozen watermark instead of L.
    "sweep_queues_the_wrong_since": (TRANSITIONS, _data(EFFECT_SWEEP, opened="N"), Mutation(), 1, ("safety",),
                                     "==L["),  # INV4: assert(since == L[ep]), as SPIN prints it with the arguments
    # R6: a later material event does not raise M.
    "raise_material_does_not_raise": (TRANSITIONS, _data(EFFECT_RAISE_MATERIAL, M="M"), Mutation(), 1,
                                      ("safety",), "assertion violated"),
    # A table row: the drain of a pending-with-more pair goes to caught up.
    "row_drain_to_caught_up": (_row(PENDING_WITH_MORE, DRAIN, CAUGHT_UP, EFFECT_ACK), EFFECT_DATA, Mutation(), 1,
                               ("safety",), "assertion violated (st==dest)"),
    # Ghost-only bugs: the decision code's own variables stay consistent, each property's ghost does not.
    "wake1_window_never_starts": (TRANSITIONS, EFFECT_DATA, Mutation(wake_keeps_window_open=True), 1, ("safety",),
                                  "!(gwoken["),
    "liv1_never_wakes": (TRANSITIONS, EFFECT_DATA, Mutation(never_wake=True), 1, ("LIV1",), "acceptance cycle"),
    "redelivers_a_stale_line": (TRANSITIONS, EFFECT_DATA, Mutation(redeliver_stale=True), 2, ("safety",),
                                ">=gack["),
}
SLOW = {"raise_material_does_not_raise", "row_drain_to_caught_up"}  # each also covered by test_promela.py's kind


def _line(report: SpinReport) -> str:
    return f"{report.processes} process(es) {report.bounds}, built in {report.build_seconds:.1f}s: " + \
        "; ".join(r.line() for r in report.runs)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(SEEDED)])
def test_spin_finds_a_bug_seeded_in_the_one_source(name, tmp_path):
    need_spin()
    table, data, mutation, processes, properties, expected = SEEDED[name]
    report = run_spin(generate(table, mutation, data), processes, BOUNDS[processes], properties=properties,
                      workdir=tmp_path)
    print(_line(report))
    assert report.failed is not None, f"SPIN missed the seeded bug {name}"
    assert expected in report.failed.output, report.failed.output[-2000:]


def _kind(kind: str, **changes) -> tuple[KindPolicy, ...]:
    assert kind in {p.kind for p in EVENT_KINDS}
    return tuple(p._replace(**changes) if p.kind == kind else p for p in EVENT_KINDS)


# A kind's policy changed in the code's table (what the gateway would do); the model's ghosts
# come from the spec's table, so each is a counterexample: name -> (kinds, what pan must report).
KIND_SEEDED = {
    # R1: a log-only kind notifies (INV5 on the spec's ghost: no log-only notice).
    "compacted_notifies": (_kind("compacted", notifies=True), "assertion violated (opened==255)"),
    # R1: a material kind is treated as log-only (INV6: the owed event is above M, never noticed).
    "goal_changed_is_log_only": (_kind("goal_changed", notifies=False), "assertion violated"),
    # R4: the spawn no longer seeds the parent's cursor.
    "child_spawned_does_not_seed": (_kind("child_spawned", seeds_parent=False), "SPEC_SEEDS"),
    # R4: another kind seeds its actor's cursor.
    "run_failed_seeds": (_kind("run_failed", seeds_parent=True), "SPEC_SEEDS"),
}


@pytest.mark.parametrize("name", sorted(KIND_SEEDED))
def test_spin_finds_a_bug_seeded_in_a_kind_policy(name, tmp_path):
    need_spin()
    kinds, expected = KIND_SEEDED[name]
    report = run_spin(generate(kinds=kinds), 1, BOUNDS[1], properties=("safety",), workdir=tmp_path)
    print(_line(report))
    assert report.failed is not None, f"SPIN missed the seeded kind bug {name}"
    assert expected in report.failed.output, report.failed.output[-2000:]


def test_the_kind_ghosts_come_from_the_spec_not_from_the_code():
    model = generate(kinds=_kind("compacted", notifies=True))
    assert "NOTIFIES[K_COMPACTED] = 1;" in model and "SPEC_NOTIFIES[K_COMPACTED] = 0;" in model
    assert spec_kinds() == EVENT_KINDS  # the committed tables agree (test_spec_sync.py checks it too)
    with pytest.raises(ValueError, match="kinds and the spec's differ"):
        generate(kinds=EVENT_KINDS[:-1])


def test_the_unmutated_model_declares_the_ghosts_apart_from_the_decisions():
    """WAKE1 asserts on gwoken, LIV1 reads gnew (GWAKES from world.py), no re-delivery on gack:
    none of them is read by the wake/queue decisions (ASKS_WAKE, inwin, qnew)."""
    model = generate()
    assert "assert(!gwoken[w])" in model and "assert(!inwin[w])" not in model
    unwoken = next(line for line in model.splitlines() if line.startswith("#define UNWOKEN_A"))
    assert "GHELD_NEW" in unwoken and "HELD_NEW(0" not in unwoken.replace("GHELD_NEW", "")
    asks_wake = next(line for line in model.splitlines() if line.startswith("#define ASKS_WAKE"))
    assert "gnew" not in asks_wake and "GWAKES" not in asks_wake
    assert "assert(since >= gack[gp])" in model


# -- `sessionstate check --spin` reads the committed model ---------------------------------------


def test_check_spin_refuses_a_committed_model_that_differs(tmp_path, monkeypatch):
    edited = tmp_path / "notice-protocol.pml"
    edited.write_text(promela.SPEC_PATH.read_text().replace("assert(since == L[ep]);", "skip;", 1))
    monkeypatch.setattr(promela, "SPEC_PATH", edited)
    assert "line " in (runner.committed_model_difference() or "")
    failures = runner._spin(True, lambda line: None)
    assert failures and "differs from what the table generates" in failures[0]


def test_check_spin_accepts_the_committed_model():
    assert runner.committed_model_difference() is None


def test_check_spin_reports_a_missing_model(tmp_path, monkeypatch):
    monkeypatch.setattr(promela, "SPEC_PATH", Path(tmp_path / "absent.pml"))
    assert "missing" in (runner.committed_model_difference() or "")
