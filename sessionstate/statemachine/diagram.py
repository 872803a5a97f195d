"""A Mermaid state diagram generated from the machine's own events (not from the table)."""

from __future__ import annotations

from transitions import Machine

from .machine import MACHINE, compile_dispatch
from .table import STATES, UNWATCHED


def mermaid(machine: Machine = MACHINE) -> str:
    lines = ["stateDiagram-v2", f"    [*] --> {UNWATCHED}"]
    edges: dict[tuple[str, str], list[str]] = {}
    for (source, trigger), (dest, effect) in compile_dispatch(machine).items():
        label = trigger if effect in ("keep", "remove") else f"{trigger} / {effect}"
        edges.setdefault((source, dest), []).append(label)
    for source in STATES:
        for dest in STATES:
            labels = edges.get((source, dest))
            if labels:
                lines.append(f"    {source} --> {dest}: {'<br/>'.join(sorted(labels))}")
    return "\n".join(lines) + "\n"


def diagram_markdown() -> str:
    return (
        "# Notice protocol: state diagram\n\n"
        "Generated from `sessionstate.statemachine.MACHINE` by `sessionstate diagram`;"
        " do not edit by hand (a test fails when it is stale).\n"
        " Self-loops labelled only with a trigger keep the positions unchanged.\n\n"
        "```mermaid\n" + mermaid() + "```\n"
    )
