"""A counterexample report a person can read: Markdown with a Mermaid sequence diagram.

For a model-check violation (a shortest trace of actions) :func:`write_report` writes one
Markdown file: the broken rule quoted from spec/notice-protocol.md, the operations as a Mermaid
``sequenceDiagram`` (the processes, the sessions, the store, the wakes and the drains as
participants; after each step the positions ``L/N/M`` of every pair it changed), the protocol
trace (spec section 15) of the same operations run on the real store, and the command that
replays the failure. :func:`check_sequence_diagram` is the structural check of the subset of
Mermaid's sequence-diagram grammar the report uses.

Seeded bugs: ``SESSIONSTATE_CHECK_MUTATION`` names one of :data:`MUTATIONS`, options of the
model check's machine path that break a rule on purpose (the probes of the model check's own
tests). ``sessionstate check`` applies it, so a CI pipeline can show that its checks fail.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from .world import Action, describe, process_of
from .specfiles import PROTOCOL

ENV_MUTATION = "SESSIONSTATE_CHECK_MUTATION"
# name -> (run_modelcheck options, the rule it breaks)
MUTATIONS: dict[str, tuple[dict[str, Any], str]] = {
    "ambient-wakes": ({"ambient_wakes": True}, "R26"),  # ambient pairs ask to wake their watcher
    "no-owed-wakes": ({"owed_wakes": False}, "LIV1"),  # a wake inside the window is dropped
    "no-write-back": ({"write_back_on_prune": False}, "AGREE"),  # prune forgets pending material (R7)
}
SPEC = PROTOCOL
STORE, WAKES, DRAINS, HUMAN = "Store", "Wakes", "Drains", "Human"


def mutation() -> tuple[str, dict[str, Any]] | None:
    """The seeded bug the environment selects, or None; an unknown name raises."""
    name = os.environ.get(ENV_MUTATION, "").strip()
    if not name:
        return None
    if name not in MUTATIONS:
        raise ValueError(f"{ENV_MUTATION}={name!r}: known mutations are {', '.join(MUTATIONS)}")
    return name, MUTATIONS[name][0]


def quote_rule(rule: str, spec: Path = SPEC) -> str | None:
    """The spec's paragraph that states ``rule`` (``- **R26 — …**`` up to the next item)."""
    if not spec.is_file():
        return None
    lines = spec.read_text(encoding="utf-8").splitlines()
    head = re.compile(rf"^- \*\*{re.escape(rule)} —")
    for i, line in enumerate(lines):
        if head.match(line):
            out = [line]
            for more in lines[i + 1:]:
                if not more.strip() or more.startswith("- **") or more.startswith("#"):
                    break
                out.append(more)
            return "\n".join(out)
    return None


def _who(action: Action, processes: int) -> str:
    """The participant that starts an action."""
    kind = action[0]
    if kind == "event":
        return HUMAN if action[2] is None else action[2]
    process = process_of(action)
    if process is not None:
        return f"P{process}"
    if kind in ("drain",):
        return action[1]
    return "P0" if processes == 1 else STORE


def _text(text: str) -> str:
    """Note and message text Mermaid reads literally (no statement separators or entities)."""
    return re.sub(r"[;#:]", " ", text).replace("  ", " ").strip()


def steps_of(trace: list[Action], processes: int, options: dict[str, Any]) -> list[dict[str, Any]]:
    """Each step of ``trace`` rerun on the model: its positions, wakes, deliveries, messages."""
    from .modelcheck import initial_node, step

    mach_options = {k: v for k, v in options.items() if k != "owed_wakes"}
    node = initial_node(processes, **mach_options)
    out = []
    for action in trace:
        before = node.ref.positions()
        ref_queue = set(node.ref.queue)
        node, messages = step(node, action, owed_wakes=options.get("owed_wakes", True))
        after = node.ref.positions()
        changed = {pair: after.get(pair) for pair in sorted(set(before) | set(after)) if before.get(pair) != after.get(pair)}
        delivered = sorted(n for n in ref_queue - set(node.ref.queue) if action[0] == "drain" and n[0] == action[1])
        out.append(dict(action=action, changed=changed, woken=sorted(set(node.mach.woken) | set(node.ref.model.wake_requests)),
                        delivered=delivered, messages=messages))
    return out


def sequence_diagram(steps: list[dict[str, Any]], processes: int, violated: list[str]) -> str:
    procs = [f"P{p}" for p in range(processes)]
    lines = ["sequenceDiagram"]
    lines += [f"    participant {p} as process {p[1:]}" for p in procs]
    lines += [f"    participant {s} as session {s}" for s in ("A", "B", "C")]
    lines += [f"    participant {HUMAN} as a human", f"    participant {STORE} as the store",
              f"    participant {WAKES} as wakes", f"    participant {DRAINS} as drains"]
    for index, st in enumerate(steps, 1):
        action = st["action"]
        who = _who(action, processes)
        kind = action[0]
        text = _text(f"{index}. {describe(action)}")
        if kind == "drain":
            lines.append(f"    {who}->>{DRAINS}: {text}")
            got = ", ".join(f"{w}-{t} since {s}" for w, t, s in st["delivered"]) or "nothing"
            lines.append(f"    {DRAINS}-->>{who}: {_text('delivered ' + got)}")
        elif kind == "tick":
            lines.append(f"    {WAKES}->>{WAKES}: {text}")
        else:
            lines.append(f"    {who}->>{STORE}: {text}")
        for pair, positions in st["changed"].items():
            where = f"{pair[0]}-{pair[1]}"
            value = "no cursor" if positions is None else "L/N/M = " + "/".join(str(p) for p in positions)
            lines.append(f"    Note over {STORE}: {_text(f'{where} {value}')}")
        for watcher, target in st["woken"]:
            lines.append(f"    {WAKES}-->>{watcher}: {_text(f'on_wake for {target}')}")
        if st["messages"]:
            lines.append(f"    Note over {STORE},{DRAINS}: {_text('VIOLATED ' + ' / '.join(violated))}")
    return "\n".join(lines)


_PARTICIPANT = re.compile(r"^    participant ([A-Za-z][A-Za-z0-9_]*) as [^;#:\n]+$")
_MESSAGE = re.compile(r"^    ([A-Za-z][A-Za-z0-9_]*)(->>|-->>)([A-Za-z][A-Za-z0-9_]*): [^;#\n]+$")
_NOTE = re.compile(r"^    Note over ([A-Za-z][A-Za-z0-9_]*)(?:,([A-Za-z][A-Za-z0-9_]*))?: [^;#\n]+$")


def check_sequence_diagram(text: str) -> list[str]:
    """Problems with ``text`` as a Mermaid sequence diagram of the form the report writes:
    the header, participants declared before any message, messages and notes between declared
    participants, no text Mermaid would read as a separator or an entity. Empty: it parses."""
    lines = text.splitlines()
    if not lines or lines[0] != "sequenceDiagram":
        return ["the first line is not `sequenceDiagram`"]
    declared: set[str] = set()
    problems = []
    body = False
    for number, line in enumerate(lines[1:], 2):
        if m := _PARTICIPANT.match(line):
            if body:
                problems.append(f"line {number}: participant declared after the first message")
            if m[1] in declared:
                problems.append(f"line {number}: participant {m[1]} declared twice")
            declared.add(m[1])
            continue
        m = _MESSAGE.match(line) or _NOTE.match(line)
        if not m:
            problems.append(f"line {number}: not a participant, message or note: {line!r}")
            continue
        body = True
        names = [m[1], m[3]] if _MESSAGE.match(line) else [n for n in (m[1], m[2]) if n]
        problems += [f"line {number}: undeclared participant {n}" for n in names if n not in declared]
    if not body:
        problems.append("no message")
    return problems


def protocol_trace(trace: list[Action], processes: int) -> list[str]:
    """The operations run on the real store with the protocol trace on (spec section 15)."""
    from .replay import replay_trace, replay_two_process_trace

    with tempfile.TemporaryDirectory(prefix="sessionstate-cex-") as tmp:
        path = Path(tmp) / "trace.jsonl"
        old = os.environ.get("SESSIONSTATE_TRACE")
        os.environ["SESSIONSTATE_TRACE"] = str(path)
        try:
            (replay_trace if processes == 1 else replay_two_process_trace)(trace, Path(tmp))
        finally:
            if old is None:
                del os.environ["SESSIONSTATE_TRACE"]
            else:
                os.environ["SESSIONSTATE_TRACE"] = old
        return path.read_text(encoding="utf-8").splitlines() if path.is_file() else []


def render_report(trace: list[Action], messages: list[str], processes: int, replay: str,
                  options: dict[str, Any] | None = None, title: str = "model check") -> str:
    from .results import rules_in

    options = options or {}
    violated = [r for r in rules_in("\n".join(messages)) if r != "MACHINE"] or ["MACHINE"]
    steps = steps_of(trace, processes, options)
    diagram = sequence_diagram(steps, processes, violated)
    out = [f"# Counterexample: {', '.join(violated)} ({title}, {processes} process{'es' if processes > 1 else ''})",
           "", "## The broken rule", ""]
    for rule in violated:
        quoted = quote_rule(rule)
        out += ["> " + line for line in quoted.splitlines()] + [""] if quoted else [f"{rule}: (not a numbered rule of the spec)", ""]
    out += ["What the check saw:", "", "```text", *messages, "```", "",
            "## Replay", "", "```sh", replay, "```", "",
            f"## The operations ({len(trace)} steps, shortest: the search is breadth-first)", "",
            "After each step the notes give the positions L/N/M of every pair it changed (spec section 2).", "",
            "```mermaid", diagram, "```", "", "| step | operation | positions after | wakes |", "|---|---|---|---|"]
    for index, st in enumerate(steps, 1):
        changed = "; ".join(f"{w}→{t}: {'-' if p is None else '/'.join(map(str, p))}" for (w, t), p in st["changed"].items())
        woken = ", ".join(f"{w} ({t})" for w, t in st["woken"])
        out.append(f"| {index} | {describe(st['action'])} | {changed} | {woken} |")
    lines = protocol_trace(trace, processes)
    out += ["", "## Protocol trace of the same operations on the real store (spec section 15)", "",
            "The real gateway (which carries no seeded change) ran the same operations; compare its steps with the diagram.", "",
            "```json", *lines, "```", ""]
    return "\n".join(out)


def write_report(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.md"
    path.write_text(text, encoding="utf-8")
    return path
