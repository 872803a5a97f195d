"""The SQL that decides (``store/decision_sql.py``) equals the Python effects and the Promela
model on random cursor states, and all three equal the spec's effect table.

The three are generated from one source, the statemachine's effect data and transition table:
the Python effects compiled at import, the Promela inlines and dispatch run by SPIN, the SQL
evaluated by the PostgreSQL server. The reference they are held to is written here from the
spec's section 5 and its transition table (read from spec/notice-protocol.md), importing
nothing of the package's effects. A bug seeded into the effect data shows in all three
against the reference, in the lone record's own decision on a real server, and SPIN finds it
in the model.
"""

from __future__ import annotations

import random
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from sessionstate import Gateway, notice_text
from sessionstate.errors import ProtocolError
from sessionstate.statemachine import effectdata
from sessionstate.statemachine.effectdata import EFFECT_DATA, EffectSpec
from sessionstate.statemachine.effects import compile_effects
from sessionstate.statemachine.table import (
    DRAIN,
    LOG_ONLY_EVENT,
    MATERIAL_EVENT,
    RESTART_SWEEP,
    SEED,
    SELF_EVENT,
    TRANSITIONS,
    TRIGGERS,
)
from sessionstate.store.decision_sql import Decisions, fired
from sessionstate.store import decision_sql
from sessionstate.verify import promela
from sessionstate.verify.spin import BOUNDS, run_spin, spin_available
from tests.protocol.spec_tables import transition_rows
from tests.store.second_connection import run_beside
from tests.verify.test_promela import need_spin

# The triggers whose effects keep or update an existing cursor: what SQL decides on a row.
DECIDED = (MATERIAL_EVENT, SELF_EVENT, LOG_ONLY_EVENT, DRAIN, RESTART_SWEEP, SEED)
SAMPLES = 400
Outcome = tuple[tuple[int, int, int], "int | None"] | None  # None: illegal in that state

# Spec section 5, by hand: (L, N, M, s) -> (new positions, changesSince of the notice opened).
REFERENCE_EFFECTS = {
    "keep": lambda L, N, M, s: ((L, N, M), None),
    "freeze": lambda L, N, M, s: ((L, s, s), L),
    "raise_material": lambda L, N, M, s: ((L, N, max(M, s)), None),
    "ack": lambda L, N, M, s: ((N, max(M, N), M), N if M > N else None),
    "sweep": lambda L, N, M, s: ((L, M, M), L),
}


def reference_state(L: int, N: int, M: int) -> str:
    """Spec section 2, by hand."""
    if L == N:
        return "caught_up"
    return "notice_pending" if N == M else "pending_with_more"


SPEC_TABLE = {(source, trigger): effect for source, trigger, _, effect in transition_rows()}


def reference(trigger: str, L: int, N: int, M: int, s: int) -> Outcome:
    effect = SPEC_TABLE.get((reference_state(L, N, M), trigger), "illegal")
    return None if effect == "illegal" else REFERENCE_EFFECTS[effect](L, N, M, s)


def random_states(seed: int = 49) -> list[tuple[int, int, int, int]]:
    """Valid cursor positions (INV1) and a trigger sequence above them (an event is newer than
    every position; a drain and a sweep read none), all below Promela's byte NONE."""
    rng = random.Random(seed)
    states = []
    for _ in range(SAMPLES):
        L = rng.randint(0, 120)
        shape = rng.choice(("caught_up", "notice_pending", "pending_with_more"))
        N = L if shape == "caught_up" else rng.randint(L + 1, 180)
        M = N if shape != "pending_with_more" else rng.randint(N + 1, 240)
        states.append((L, N, M, rng.randint(M + 1, 250)))  # an event's sequence is above every position
    return states


STATES = random_states()


def python_outcomes(effects: Mapping[str, EffectSpec] = EFFECT_DATA) -> dict[tuple[str, int], Outcome]:
    functions = compile_effects(effects)
    table = {(t.source, t.trigger): t.effect for t in TRANSITIONS}
    from sessionstate.statemachine.positions import derive_state

    out: dict[tuple[str, int], Outcome] = {}
    for trigger in DECIDED:
        for i, (L, N, M, s) in enumerate(STATES):
            effect = table.get((derive_state((L, N, M)), trigger))
            if effect is None:
                out[(trigger, i)] = None
                continue
            positions, opened = functions[effect]((L, N, M), s)
            assert positions is not None
            out[(trigger, i)] = (tuple(positions), opened)
    return out


def sql_outcomes(url: str, effects: Mapping[str, EffectSpec] = EFFECT_DATA) -> dict[tuple[str, int], Outcome]:
    names = {"L": "v.l", "N": "v.n", "M": "v.m", "s": "v.s"}
    values = ", ".join(f"({i}, {L}, {N}, {M}, {s})" for i, (L, N, M, s) in enumerate(STATES))
    out: dict[tuple[str, int], Outcome] = {}
    for trigger in DECIDED:
        sql = fired(trigger, names, Decisions(TRANSITIONS, effects))
        rows = run_beside(url, f"SELECT v.i, {sql.L}, {sql.N}, {sql.M}, {sql.opened}"
                               f" FROM (VALUES {values}) AS v(i, l, n, m, s) ORDER BY v.i")
        for i, L2, N2, M2, opened in rows:
            out[(trigger, i)] = None if L2 is None else ((L2, N2, M2), opened)
    return out


def promela_outcomes(tmp_path: Path, effects: Mapping[str, EffectSpec] = EFFECT_DATA) -> dict[tuple[str, int], Outcome]:
    """Each legal sample fired through the model's own dispatch (``fire``: derive, the table's
    effect, the derived next state asserted) and effect inlines, run by SPIN's simulator."""
    lines = ["#define PROCS 1", "#define MAXSEQ 3", promela._constants(), promela._globals(),  # noqa: SLF001
             promela._effects(promela.effect_inlines(effects)), promela._derive(), promela._dispatch(TRANSITIONS),  # noqa: SLF001
             f"byte sL[{SAMPLES}]; byte sN[{SAMPLES}]; byte sM[{SAMPLES}]; byte sS[{SAMPLES}]; short i;",
             "init {", "  load_table();"]
    lines += [f"  sL[{i}] = {L}; sN[{i}] = {N}; sM[{i}] = {M}; sS[{i}] = {s};" for i, (L, N, M, s) in enumerate(STATES)]
    lines.append(f"  for (i : 0 .. {SAMPLES - 1}) {{")
    for trigger in DECIDED:
        tr = promela.trigger_macro(trigger)
        lines += [
            "    watched[0] = 1; L[0] = sL[i]; N[0] = sN[i]; M[0] = sM[i]; derive(0);",
            f"    if :: EFF[st * NTRIG + {tr}] != NONE -> fire(0, {tr}, sS[i]);"
            f' printf("X {trigger} %d %d %d %d %d\\n", i, L[0], N[0], M[0], opened) :: else -> skip fi;',
        ]
    lines += ["  }", "}"]
    # What the model does not fire (illegal in the sample's state) the reference calls illegal too.
    out: dict[tuple[str, int], Outcome] = {(trigger, i): None for trigger in DECIDED for i in range(SAMPLES)}
    (tmp_path / "decide.pml").write_text("\n".join(lines) + "\n")
    run = subprocess.run(["spin", "decide.pml"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         stdin=subprocess.DEVNULL)
    assert "assertion violated" not in run.stdout, run.stdout[-2000:]
    for raw in run.stdout.splitlines():
        parts = raw.split()
        if parts[:1] == ["X"]:
            trigger, i, L2, N2, M2, opened = parts[1], int(parts[2]), *map(int, parts[3:7])
            out[(trigger, i)] = ((L2, N2, M2), None if opened == promela.NONE else opened)
    return out


def reference_outcomes() -> dict[tuple[str, int], Outcome]:
    return {(trigger, i): reference(trigger, *state) for trigger in DECIDED for i, state in enumerate(STATES)}


def differences(found: dict[tuple[str, int], Outcome], expected: dict[tuple[str, int], Outcome]) -> list[str]:
    return [f"{key} {STATES[key[1]]}: {found.get(key)} != {expected[key]}"
            for key in expected if found.get(key) != expected[key]]


def test_the_samples_cover_every_state_and_every_decided_trigger_fires_somewhere() -> None:
    assert {reference_state(L, N, M) for L, N, M, _ in STATES} == {"caught_up", "notice_pending", "pending_with_more"}
    outcomes = reference_outcomes()
    assert all(any(outcomes[(t, i)] is not None for i in range(SAMPLES)) for t in DECIDED)
    assert set(DECIDED) < set(TRIGGERS)


def test_sql_python_and_promela_decide_alike_and_as_the_spec_on_random_cursor_states(pg_url, tmp_path) -> None:
    expected = reference_outcomes()
    assert differences(python_outcomes(), expected) == []
    assert differences(sql_outcomes(pg_url), expected) == []
    if spin_available() is not None:
        need_spin()  # skips locally, fails in CI
    assert differences(promela_outcomes(tmp_path), expected) == []


def test_the_sqls_state_and_trigger_names_are_the_statemachines() -> None:
    """The store imports nothing above it, so it names the states and R2's two triggers
    itself: they must be the statemachine's."""
    from sessionstate.statemachine import table

    assert (decision_sql.CAUGHT_UP, decision_sql.NOTICE_PENDING, decision_sql.PENDING_WITH_MORE) == table.WATCHED_STATES
    assert (decision_sql.MATERIAL_EVENT, decision_sql.SELF_EVENT) == (table.MATERIAL_EVENT, table.SELF_EVENT)


def test_python_refuses_what_sql_leaves_null() -> None:
    """An illegal (state, trigger): the Python machine raises, the SQL gives NULL (above)."""
    from sessionstate.statemachine import fire

    with pytest.raises(ProtocolError):
        fire(("w", "t"), (0, 0, 0), DRAIN)


# A seeded effect bug: freeze forgets its notice (R6), in the one source all three come from.
SILENT_FREEZE = EffectSpec("update", N="s", M="s")


@pytest.fixture
def silent_freeze(monkeypatch) -> Iterator[dict[str, EffectSpec]]:
    monkeypatch.setitem(EFFECT_DATA, "freeze", SILENT_FREEZE)
    yield EFFECT_DATA


def test_a_seeded_effect_bug_fails_all_three_against_the_spec(silent_freeze, pg_url, tmp_path) -> None:
    expected = reference_outcomes()
    for found in (python_outcomes(silent_freeze), sql_outcomes(pg_url, silent_freeze)):
        wrong = differences(found, expected)
        assert wrong and all(key.startswith(f"('{MATERIAL_EVENT}'") for key in wrong), wrong
    if spin_available() is None:
        assert differences(promela_outcomes(tmp_path, silent_freeze), expected)


def test_a_seeded_effect_bug_reaches_the_lone_records_decision_on_the_server(silent_freeze, pg_url) -> None:
    """The record function is rendered from the effect data when a store opens (its name
    hashes its body): the bug's function queues no notice for a caught-up watcher."""
    watcher, target = "agent:a:w", "agent:a:t"
    gw = Gateway.open(pg_url, notify_on_create=False, record_created=False)
    try:
        assert "freeze" in effectdata.EFFECT_DATA and EFFECT_DATA["freeze"] == SILENT_FREEZE
        gw.create_session(watcher)
        gw.create_session(target)
        gw.watch(watcher, target)
        assert gw.record_event(target, "goal_changed", actor_type="human", summary="x") is not None
        assert gw.pending_system_events(watcher) != [notice_text(target, 0)]  # the spec's notice is missing
    finally:
        gw.close()


def test_spin_finds_the_seeded_effect_bug(silent_freeze, tmp_path) -> None:
    need_spin()
    report = run_spin(promela.generate(effects=silent_freeze), 1, BOUNDS[1], workdir=tmp_path)
    assert report.failed is not None, "SPIN missed a freeze that opens no notice"
