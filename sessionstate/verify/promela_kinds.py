"""The event kinds in the SPIN model: the code's policy decides, the spec's is the ghost.

``statemachine/table.py``'s ``EVENT_KINDS`` (what the gateway does: ``NOTIFYING_KINDS`` on the
hot path, ``SEEDING_KINDS`` on the spawn path) becomes the model's ``NOTIFIES`` and ``SEEDS``
arrays, which the world's event reads to pick its trigger and to seed. The spec's own kind
table (``spec/notice-protocol.md``, section 8), read when the model is generated, becomes
``SPEC_NOTIFIES`` and ``SPEC_SEEDS``: the obligations and the assertions (INV5, INV6, R4) are
stated on those, so a kind the code classifies differently from the spec is a counterexample,
not a model that agrees with the bug.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from ..statemachine.table import EVENT_KINDS, KindPolicy
from .specfiles import PROTOCOL

SPEC_DOC = PROTOCOL
_YES = {"yes": True, "no": False}


def spec_kinds(path: Path = SPEC_DOC) -> tuple[KindPolicy, ...]:
    """Section 8's table as written: kind, notifies, seeds the parent's cursor."""
    if not path.exists():
        raise FileNotFoundError(f"the spec ({path}) is needed to generate the SPIN model's kind ghosts")
    text = path.read_text(encoding="utf-8")
    match = re.search(r"^## 8\. Event kinds$(.*?)(?=^## )", text, re.M | re.S)
    if match is None:
        raise ValueError(f"{path} has no section '## 8. Event kinds'")
    rows = [line.strip().strip("|").split("|") for line in match.group(1).splitlines() if line.startswith("|")]
    out = []
    for cells in rows[2:]:  # the header and its separator
        kind, notifies, seeds = (cell.strip().strip("`") for cell in cells[:3])
        out.append(KindPolicy(kind, _YES[notifies], seeds_parent=_YES[seeds]))
    return tuple(out)


def kind_macro(kind: str) -> str:
    return "K_" + kind.upper()


def kinds_section(kinds: Iterable[KindPolicy] = EVENT_KINDS, spec: Iterable[KindPolicy] | None = None) -> str:
    """Kind constants, the code's and the spec's policy arrays, and the nondeterministic pick."""
    kinds = tuple(kinds)
    by_spec = {p.kind: p for p in (spec_kinds() if spec is None else spec)}
    if set(by_spec) != {p.kind for p in kinds}:
        raise ValueError(f"the code's kinds and the spec's differ: {sorted(set(by_spec) ^ {p.kind for p in kinds})}")
    lines = [
        "/* event kinds: NOTIFIES/SEEDS from statemachine/table.py (the decision), SPEC_NOTIFIES/SPEC_SEEDS",
        "   from spec/notice-protocol.md section 8 (the ghost the properties are stated on) */",
        f"#define NKINDS {len(kinds)}",
        *[f"#define {kind_macro(p.kind)} {i}" for i, p in enumerate(kinds)],
        "hidden byte NOTIFIES[NKINDS]; hidden byte SEEDS[NKINDS];",
        "hidden byte SPEC_NOTIFIES[NKINDS]; hidden byte SPEC_SEEDS[NKINDS];",
        "inline load_kinds() {",
        *[f"  NOTIFIES[{kind_macro(p.kind)}] = {int(p.notifies)}; SEEDS[{kind_macro(p.kind)}] = {int(p.seeds_parent)};"
          f" SPEC_NOTIFIES[{kind_macro(p.kind)}] = {int(by_spec[p.kind].notifies)};"
          f" SPEC_SEEDS[{kind_macro(p.kind)}] = {int(by_spec[p.kind].seeds_parent)};"
          for p in kinds],
        "}",
        "/* one kind per class of equal rows: the model reads a kind only through these four arrays,",
        "   so two kinds with equal rows have the same runs; a kind whose row differs is its own class */",
        "inline pick_kind(k) {",
        "  if",
        *[f"  :: k = {kind_macro(p.kind)}" for p in _representatives(kinds, by_spec)],
        "  fi",
        "}",
    ]
    return "\n".join(lines) + "\n"


def _representatives(kinds: tuple[KindPolicy, ...], by_spec: dict[str, KindPolicy]) -> list[KindPolicy]:
    seen: set[tuple[bool, bool, bool, bool]] = set()
    out = []
    for policy in kinds:
        spec = by_spec[policy.kind]
        row = (policy.notifies, policy.seeds_parent, spec.notifies, spec.seeds_parent)
        if row not in seen:
            seen.add(row)
            out.append(policy)
    return out
