"""The notice decision as SQL, generated from the statemachine's own data.

The transition table (``statemachine/table.py``) and the effect data
(``statemachine/effectdata.py``) are the one source of the protocol; the Python effects and
the Promela model are compiled from them, and so is the SQL here: nothing below names an
effect's assignments by hand. The store imports nothing above it, so the table and the
effects come in as plain data (``Decisions``: the gateway passes the statemachine's own when
it opens the store, as it passes the notifying kinds). A lone record on PostgreSQL decides its caught-up cursors on the
server (``postgres_record.py``) with ``fired``'s expressions, so the decision travels in the
append's round trip; tests hold ``fired`` equal to ``statemachine.fire`` and to the Promela
inlines on random cursor states.

Each expression reads SQL column (or variable) names for ``L``, ``N``, ``M`` and ``s``; the
state a set of positions is in is derived in SQL from the same equalities as
``positions.derive_state`` (INV1's orderings assumed: a row breaking them gets ``NULL``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

__all__ = ["Decisions", "FiredSql", "expression", "fired", "state_condition"]

Expr = Any  # effectdata's grammar: a name, None, ("max", a, b) or ("if_gt", a, b, then, else)
# The watched states, by the statemachine's names (a test holds them equal to its STATES).
CAUGHT_UP, NOTICE_PENDING, PENDING_WITH_MORE = "caught_up", "notice_pending", "pending_with_more"
# R2's two event triggers on a watcher's cursor: the event's actor is that watcher, or not.
MATERIAL_EVENT, SELF_EVENT = "material_event", "self_event"


class Decisions(NamedTuple):
    """The protocol as the SQL needs it: the transition table's rows (source, trigger,
    destination, effect) and each effect's spec (``cursor``, ``L``, ``N``, ``M``,
    ``opened``: ``statemachine.effectdata.EffectSpec``)."""

    transitions: Iterable[tuple[str, str, str, str]]
    effects: Mapping[str, Any]


class FiredSql(NamedTuple):
    """A trigger's outcome as SQL expressions over the old positions: the new ``L``, ``N``,
    ``M`` and the ``changesSince`` of the notice it opens (``NULL``: none). Every one is
    ``NULL`` for a state in which the table does not allow the trigger."""

    L: str
    N: str
    M: str
    opened: str


def expression(expr: Expr, names: Mapping[str, str]) -> str:
    """One effect expression (``effectdata``'s grammar) as SQL over ``names``."""
    if expr is None:
        return "NULL::bigint"
    if isinstance(expr, str):
        return names[expr]
    op, *args = expr
    if op == "max":
        return f"GREATEST({expression(args[0], names)}, {expression(args[1], names)})"
    if op == "if_gt":
        a, b, then, other = (expression(x, names) for x in args)
        return f"(CASE WHEN {a} > {b} THEN {then} ELSE {other} END)"
    raise ValueError(f"an effect uses an unknown expression {expr!r}")


def state_condition(state: str, names: Mapping[str, str]) -> str:
    """The SQL predicate of ``state`` over positions (``derive_state``'s equalities)."""
    L, N, M = names["L"], names["N"], names["M"]
    ordered = f"{L} <= {N} AND {N} <= {M}"
    if state == CAUGHT_UP:
        return f"({L} = {N} AND {N} = {M})"
    if state == NOTICE_PENDING:
        return f"({ordered} AND {L} < {N} AND {N} = {M})"
    if state == PENDING_WITH_MORE:
        return f"({ordered} AND {L} < {N} AND {N} < {M})"
    raise ValueError(f"no positions are in state {state!r}")


def fired(
    trigger: str,
    names: Mapping[str, str],
    decisions: Decisions,
    *,
    states: tuple[str, ...] = (CAUGHT_UP, NOTICE_PENDING, PENDING_WITH_MORE),
) -> FiredSql:
    """``trigger`` fired on a watched pair with positions ``names`` (and sequence ``s``), as
    SQL: one ``CASE`` per output over the pair's derived state, each branch the effect the
    table gives that (state, trigger), rendered from its effect data. ``states`` narrows the
    branches to the states the caller's rows can be in (a read of caught-up cursors needs one).
    Only effects that keep or update a cursor can be rendered: the event triggers' kind."""
    branches: dict[str, list[str]] = {"L": [], "N": [], "M": [], "opened": []}
    by_source = {source: effect for source, trig, _, effect in decisions.transitions if trig == trigger}
    for state in states:
        effect = by_source.get(state)
        if effect is None:
            continue  # illegal here: every output NULL
        spec = decisions.effects[effect]
        if spec.cursor not in ("keep", "update"):
            raise ValueError(f"{effect}: a {spec.cursor} effect is not a decision on an existing row")
        when = state_condition(state, names)
        for output in ("L", "N", "M", "opened"):
            branches[output].append(f"WHEN {when} THEN {expression(getattr(spec, output), names)}")
    return FiredSql(*(
        "(CASE " + " ".join(branches[output]) + " END)" if branches[output] else "NULL::bigint"
        for output in ("L", "N", "M", "opened")
    ))
