"""Spec 15.2's merge of tied units (transactions without events that read the same commit key
in different processes) looks past each process's next unit.

Found by the nemesis (trials/nemesis.py, SQLite, seed 1): process A committed, at one commit
key, a drain of one pair and then a ``watch`` of another pair that kept its positions (a seed
``keep``); process B drained that other pair at the same key, after A's ``keep``. Looking only
at each process's next unit, the merge took B's drain first (A's next unit, on a disjoint pair,
still fitted after it), and A's ``keep`` then started from positions the pair had left: a
false T3 on a trace the real commit order explains.
"""

from __future__ import annotations

from sessionstate.verify.trace_read import TraceLine, Unit, merge

P, Q = ("w1", ("t1", "a")), ("w2", ("t2", "a"))


def unit(pid: int, tx: int, key: int, steps: list[tuple[tuple, tuple, tuple]]) -> Unit:
    made = Unit((pid, f"g{pid}"), tx, key, tx)
    for pair, before, after in steps:
        made.lines.append(TraceLine("t", tx, {"op": "step", "pair": pair, "before": before, "after": after}))
    return made


def test_a_tied_unit_behind_another_of_its_process_keeps_its_place_before_a_move_of_its_pair():
    positions = {P: (1, 1, 1), Q: (1, 2, 3)}

    def fits(u: Unit, overlay: dict) -> bool:
        seen = set()
        for line in u.lines:
            pair = line.data["pair"]
            if pair not in seen and overlay.get(pair, positions[pair]) != line.data["before"]:
                return False
            seen.add(pair)
        return True

    def outcome(u: Unit) -> dict:
        return {line.data["pair"]: line.data["after"] for line in u.lines}

    # B is the smaller process id: the merge looks at it first.
    a = [unit(2, 1, 10, [(P, (1, 1, 1), (1, 1, 1))]), unit(2, 2, 10, [(Q, (1, 2, 3), (1, 2, 3))])]  # drain, keep
    b = [unit(1, 1, 10, [(Q, (1, 2, 3), (2, 3, 3))])]  # the drain of Q that A's keep came before
    order = []
    for chosen in merge({1: b, 2: a}, fits, outcome):
        assert fits(chosen, {}), f"{chosen.proc} tx {chosen.tx} merged where it does not fit"
        positions.update(outcome(chosen))
        order.append((chosen.proc[0], chosen.tx))
    assert order == [(2, 1), (2, 2), (1, 1)]
