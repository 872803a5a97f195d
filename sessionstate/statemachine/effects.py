"""The effects of the transition table as pure functions, compiled from ``effectdata.py``.

Each takes the old positions and the trigger's sequence (the event's sequence, or the target's
state version for ``seed``) and returns an ``Outcome``: the new positions (``None`` when the
cursor goes away) and the ``changesSince`` of a notice to queue, if any. The old positions may
be a ``Positions`` or the store's plain ``(last_seen, notified, material)`` tuple.

Nothing here is written by hand: ``compile_effects`` turns each ``EffectSpec`` into the source
of one small function and compiles it once, at import (as ``machine.py`` compiles the dispatch),
so the hot path calls a plain function, as fast as a hand-written one. The Promela model is
rendered from the same data (``verify/promela.py``).
"""

from __future__ import annotations

from typing import Callable, Mapping

from .effectdata import EFFECT_DATA, EffectSpec, check, names_in, to_python
from .positions import Positions

# (new positions, changesSince of a notice to queue): a plain tuple, as effects run once per
# watcher on the event hot path.
Outcome = tuple[Positions | None, int | None]
PositionsLike = tuple[int, int, int]  # Positions, or the store's plain tuple
Effect = Callable[[PositionsLike | None, int | None], Outcome]


def python_source(name: str, spec: EffectSpec) -> str:
    """The source of the one function ``spec`` compiles to."""
    check(name, spec)
    lines = [f"def {name}(old, sequence):"]
    if spec.cursor == "keep":
        lines.append("    return (None if old is None else _new(Positions, old)), None")
    elif spec.cursor == "remove":
        lines.append("    return None, None")
    else:
        used = set().union(*(names_in(e) for e in spec[1:]))
        if "s" in used:
            lines.append(f"    assert sequence is not None, {name + ' needs the trigger sequence'!r}")
        if spec.cursor == "update":
            lines.append(f"    assert old is not None, {name + ' needs a cursor'!r}")
            if used & {"L", "N", "M"}:
                lines.append("    L, N, M = old")
        lines.append(f"    return _new(Positions, ({to_python(spec.L)}, {to_python(spec.N)}, {to_python(spec.M)})),"
                     f" {to_python(spec.opened)}")
    return "\n".join(lines) + "\n"


def compile_effects(data: Mapping[str, EffectSpec] = EFFECT_DATA) -> dict[str, Effect]:
    out: dict[str, Effect] = {}
    for name, spec in data.items():
        # tuple.__new__ makes the same Positions without the Python frame of its __new__
        namespace: dict[str, object] = {"Positions": Positions, "_new": tuple.__new__}
        exec(compile(python_source(name, spec), f"<effect {name}>", "exec"), namespace)  # noqa: S102
        function = namespace[name]
        function.__doc__ = f"{name}: {spec} (compiled from statemachine/effectdata.py)"
        out[name] = function  # type: ignore[assignment]
    return out


EFFECT_FUNCTIONS: dict[str, Effect] = compile_effects()

seed = EFFECT_FUNCTIONS["seed"]
keep = EFFECT_FUNCTIONS["keep"]
freeze = EFFECT_FUNCTIONS["freeze"]
raise_material = EFFECT_FUNCTIONS["raise_material"]
ack = EFFECT_FUNCTIONS["ack"]
sweep = EFFECT_FUNCTIONS["sweep"]
remove = EFFECT_FUNCTIONS["remove"]
