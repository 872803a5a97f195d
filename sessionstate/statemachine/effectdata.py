"""The effects of the transition table as data: a few assignments over the positions.

This is the one source of the effects. ``effects.py`` compiles it, once at import, into the
plain Python functions the hot path calls; ``verify/promela.py`` renders the same data as the
Promela inlines SPIN checks. A change here changes both.

The names an expression may read: ``L``, ``N``, ``M`` (the old positions: last seen, notified
= the frozen watermark, material) and ``s`` (the trigger's sequence: the event's sequence, or
the target's state version for ``seed``). An expression is one of those names, ``None`` (no
notice), or a tuple ``("max", a, b)`` or ``("if_gt", a, b, then, else)`` (``then`` when
``a > b``, else ``else``). The assignments of one effect are simultaneous: every right-hand
side reads the old positions.

``cursor`` says what becomes of the cursor row: ``create`` (positions from ``s`` alone; the
pair had none), ``update`` (the pair must have one), ``keep`` (nothing changes, a missing row
stays missing) or ``remove`` (the row goes). ``opened`` is the ``changesSince`` of the notice
the effect queues, or ``None``.
"""

from __future__ import annotations

from typing import Final, NamedTuple, Union

from .table import (
    EFFECT_ACK,
    EFFECT_FREEZE,
    EFFECT_KEEP,
    EFFECT_RAISE_MATERIAL,
    EFFECT_REMOVE,
    EFFECT_SEED,
    EFFECT_SWEEP,
)

Expr = Union[str, None, tuple]
NAMES: Final = ("L", "N", "M", "s")
CURSORS: Final = ("create", "update", "keep", "remove")


class EffectSpec(NamedTuple):
    cursor: str
    L: Expr = "L"
    N: Expr = "N"
    M: Expr = "M"
    opened: Expr = None


EFFECT_DATA: Final[dict[str, EffectSpec]] = {
    # R1: a new cursor starts caught up at the target's state version.
    EFFECT_SEED: EffectSpec("create", L="s", N="s", M="s"),
    EFFECT_KEEP: EffectSpec("keep"),
    # R3, R6: the first material event freezes the watermark and opens one notice since L.
    EFFECT_FREEZE: EffectSpec("update", N="s", M="s", opened="L"),
    # R6: later material events raise M only.
    EFFECT_RAISE_MATERIAL: EffectSpec("update", M=("max", "M", "s")),
    # R8: the drain acknowledges to the frozen watermark; interleaved work reopens exactly one
    # notice, from the old watermark.
    EFFECT_ACK: EffectSpec("update", L="N", N=("max", "M", "N"), opened=("if_gt", "M", "N", "N", None)),
    # R11: the restart sweep re-materialises the pending notice, frozen at M.
    EFFECT_SWEEP: EffectSpec("update", N="M", opened="L"),
    EFFECT_REMOVE: EffectSpec("remove"),
}


def names_in(expr: Expr) -> set[str]:
    if expr is None:
        return set()
    if isinstance(expr, str):
        if expr not in NAMES:
            raise ValueError(f"an effect reads an unknown name {expr!r} (known: {', '.join(NAMES)})")
        return {expr}
    op, *args = expr
    if (op, len(args)) not in (("max", 2), ("if_gt", 4)):
        raise ValueError(f"an effect uses an unknown expression {expr!r}")
    return set().union(*(names_in(a) for a in args))


def check(name: str, spec: EffectSpec) -> None:
    """Refuse an effect the compilers cannot render faithfully."""
    if spec.cursor not in CURSORS:
        raise ValueError(f"effect {name}: unknown cursor action {spec.cursor!r}")
    used = set().union(*(names_in(e) for e in (spec.L, spec.N, spec.M, spec.opened)))
    if spec.cursor == "create" and used - {"s"}:
        raise ValueError(f"effect {name} creates a cursor but reads the old positions {sorted(used - {'s'})}")
    if spec.cursor in ("keep", "remove") and spec != EffectSpec(spec.cursor):
        raise ValueError(f"effect {name}: a {spec.cursor} effect assigns nothing")


def to_python(expr: Expr) -> str:
    if expr is None:
        return "None"
    if isinstance(expr, str):
        return "sequence" if expr == "s" else expr
    op, *args = expr
    if op == "max":
        return f"max({to_python(args[0])}, {to_python(args[1])})"
    a, b, then, other = (to_python(x) for x in args)
    return f"({then} if {a} > {b} else {other})"


def to_promela(expr: Expr) -> str:
    if expr is None:
        return "NONE"
    if isinstance(expr, str):
        return "s" if expr == "s" else f"{expr}[p]"
    op, *args = expr
    if op == "max":
        a, b = to_promela(args[0]), to_promela(args[1])
        return f"({a} > {b} -> {a} : {b})"
    a, b, then, other = (to_promela(x) for x in args)
    return f"({a} > {b} -> {then} : {other})"


def promela_inline(name: str, spec: EffectSpec) -> str:
    """The body of the Promela inline ``eff_<name>(p, s)``: the same assignments on pair ``p``,
    through the hidden scratch ``eL``/``eN``/``eM`` (simultaneous), ``opened`` set to the
    notice's ``changesSince`` or ``NONE``."""
    check(name, spec)
    if spec.cursor == "keep":
        return "opened = NONE"
    if spec.cursor == "remove":
        return "watched[p] = 0; L[p] = 0; N[p] = 0; M[p] = 0; opened = NONE"
    if spec.cursor == "create":
        return (f"watched[p] = 1; L[p] = {to_promela(spec.L)}; N[p] = {to_promela(spec.N)}; "
                f"M[p] = {to_promela(spec.M)}; opened = {to_promela(spec.opened)}")
    changed = [(k, e) for k, e in (("L", spec.L), ("N", spec.N), ("M", spec.M)) if e != k]
    parts = [f"e{k} = {to_promela(e)}" for k, e in changed]
    parts.append(f"opened = {to_promela(spec.opened)}")
    parts += [f"{k}[p] = e{k}" for k, _ in changed]
    return "; ".join(parts)


PROMELA_SCRATCH: Final = "hidden byte eL; hidden byte eN; hidden byte eM;"
