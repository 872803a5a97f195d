"""SPIN's world held to the real gateway: random simulation runs of the generated model replayed
on real gateways (trials/spinworld.py), comparing positions, every process's queue
and A's wakes after every step; and changes to the world the gateway does not share (heal,
self-suppression, claims), seeded into the generated text, shown to make the replay differ.

The slow profile runs hundreds of seeds:
``SESSIONSTATE_SLOW=1 ./dev test -q -m slow tests/trials/test_spin_world.py``.
"""

from __future__ import annotations

import os

import pytest

from sessionstate.verify import promela
from tests.verify.helpers import need_spin
from trials import spinworld

BOUNDS = {"MAXSEQ": 4, "STEPS": 12}
CI_SEEDS = 24  # per process count: about 10 s each on a loaded 2-core box


def _run(model: str, processes: int, seeds: range, tmp_path) -> list[spinworld.SimReplay]:
    return [spinworld.run_seed(model, processes, seed, tmp_path / f"p{processes}s{seed}", BOUNDS) for seed in seeds]


@pytest.mark.parametrize("processes", [1, 2])
def test_random_runs_of_the_model_replay_equal_on_real_gateways(processes, tmp_path):
    need_spin()
    runs = _run(promela.generate(), processes, range(1, CI_SEEDS + 1), tmp_path)
    differences = [d for r in runs for d in r.differences]
    assert differences == [], differences[:10]
    # The runs exercise what they compare: steps, queued lines and A's wakes.
    assert sum(r.steps for r in runs) > 10 * CI_SEEDS
    assert sum(r.queued_lines for r in runs) > CI_SEEDS
    assert sum(r.model_wakes for r in runs) > 0
    words = {w for r in runs for w in r.words}
    assert {"event", "drain", "restart", "window"} <= words
    if processes == 2:
        assert {"attach", "sweep"} <= words


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("SESSIONSTATE_SLOW") != "1", reason="slow profile: SESSIONSTATE_SLOW=1")
@pytest.mark.parametrize("processes", [1, 2])
def test_hundreds_of_random_runs_replay_equal(processes, tmp_path):
    need_spin()
    runs = _run(promela.generate(), processes, range(1, 301), tmp_path)
    differences = [d for r in runs for d in r.differences]
    assert differences == [], differences[:10]


# Each mutation: (the text in the generated model, its replacement, process count, seeds).
MUTATIONS = {
    # R23: the re-wake at an event once the window passed, dropped.
    "heal_rewake": ("wake(WI[pe], q, pe)", "skip", 1),
    # R23: the owed wake at the window's end, dropped.
    "owed_wake": ("wake(w, qw, wc)", "skip", 1),
    # R2: an event by the watcher itself notifies it.
    "self_suppression": ("NOTIFIES[k] && a == PW[pe] ->", "false ->", 1),
    # R20: an attach that does not move the claim.
    "claims": ("claim[w] = q;", "skip;", 2),
}
# Seeds that reach each mutant's code; the owed wake needs a wake, a second notice inside the
# window and the window's end in one run: with the event kinds picked at random (three classes,
# spec section 8) the first such seed at these bounds is 97 (then 150), so its range starts there.
MUTATION_SEEDS = {"heal_rewake": range(1, 121), "owed_wake": range(90, 101), "self_suppression": range(1, 11),
                  "claims": range(1, 31)}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_a_world_the_gateway_does_not_share_fails_the_replay(name, tmp_path):
    need_spin()
    old, new, processes = MUTATIONS[name]
    model = promela.generate()
    assert model.count(old) == 1, f"the generated model no longer has {old!r}: follow its new text"
    found = []
    for seed in MUTATION_SEEDS[name]:
        run = spinworld.run_seed(model.replace(old, new), processes, seed, tmp_path / str(seed), BOUNDS)
        if run.differences:
            found.append(run.differences[0])
            break
    assert found, f"the {name} mutant replayed equal on every seed"


def test_the_queue_prints_need_the_after_inline():
    with pytest.raises(spinworld.ModelShapeChanged):
        spinworld.with_queue_prints(promela.generate().replace("inline after(q) {", "inline later(q) {"))


def test_a_woken_sub_agent_fails_the_replay(tmp_path, monkeypatch):
    """B's wakes are compared (none in the model, R12): with B's real key made main-style, the
    real gateway wakes it and some seed's replay reports it."""
    need_spin()
    monkeypatch.setitem(spinworld.SIM_KEYS, "B", "agent:b:main")
    found = []
    for seed in range(1, 31):
        run = spinworld.run_seed(promela.generate(), 1, seed, tmp_path / str(seed), BOUNDS)
        found += [d for d in run.differences if "B woken" in d]
        if found:
            break
    assert found, "no replay saw B woken for real"
