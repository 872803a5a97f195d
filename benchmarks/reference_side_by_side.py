"""The same events through the published reference and through this project, in one run.

Run (after ``sessionstate conformance --install-openclaw``, which puts the pinned reference and
Node 24 in the cache):

    ./dev run .venv/bin/python benchmarks/reference_side_by_side.py [--rounds R] [--events N] [--json PATH]

Both implementations sit behind the conformance kit's adapter protocol: this project's
``Gateway`` on an SQLite file (``sessionstate.conformance.gateway_adapter``), and openclaw's
session-state modules under Node 24 on their own ``node:sqlite`` store (the shipped
``openclaw/adapter.mjs``). Both stores use WAL with ``synchronous=NORMAL`` and commit each event
on its own. Each round sends both the same steps in one ``bench`` request; each adapter runs
them through its own ops and times every step inside its own process with a monotonic
nanosecond clock, so the pipe and the JSON are not in the figures. The two take turns round by
round, the order alternating, so slow and fast phases of a shared machine fall on both alike.

The session graph is the reference's common case: a main session and a sub-agent it spawned
(the spawn edge makes the main session the sub-agent's watcher, R4). Per round:

- ``record``: ``--events`` human messages recorded on the sub-agent; the first freezes the
  main session's cursor and queues its notice, the rest find the notice already owed;
- ``record after a drain`` and ``drain``: ``--events // 4`` times, one record that queues a
  fresh notice and the main session's turn that drains it (the notice acknowledged);
- ``changesSince``: ``--events // 4`` reads of the sub-agent's last 20 events and its version.

Each step is at the level the reference's adapter calls. ``drain``: the reference's queue peek
and consume and ``acknowledgeSessionStateNotices``; the project's ``drain_system_events``.
``changesSince``: the reference's ``listSessionStateEventsSince`` (event page, earliest
sequence, head) and ``getSessionStateVersion``; the project's signal log read under the gateway's
lock, ``Store.changes_page`` (head, earliest sequence, event page; the adapter's ``changesPage``).
Two rows above that level are the project's only (the reference's adapter has no op for them):
``session_status``, the gateway's whole answer, ``Gateway.session_status`` with
``changes_since`` (the same read, then the agent-facing event objects with their ISO instants),
and ``session_status tool call``, ``call_tool(main, "session_status", {sessionKey,
changesSince})`` (argument schema, caller and policy, visibility, the status card).

The raw floor is ``_support.RawLog`` on a plain ``sqlite3`` connection, with the same graph
(made by the project's own API, so schema and rows are identical): the insert, the head bump
and the caught-up read of one event per transaction, timed in this process in the same rounds.

Printed: the median over rounds of each step's microseconds, the reference's time over the
project's (for the steps both sides run), and the project's record over the raw floor. The records' sequences must be equal in
both implementations (the same events); the run fails otherwise.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.environ.get("SESSIONSTATE_TREE", str(Path(__file__).resolve().parent.parent)))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _support import AGENT, RawLog  # noqa: E402

from sessionstate import Gateway  # noqa: E402
from sessionstate.conformance import openclaw_install  # noqa: E402
from sessionstate.conformance.protocol import Adapter  # noqa: E402

MAIN, CHILD = "agent:a:main", "agent:a:subagent:c1"
KIND = "human_direct_message"
START = 1_700_000_000.0
LABELS = ("record", "record after a drain", "drain", "changesSince")  # both sides
STATUS, TOOL = "session_status", "session_status tool call"  # the project's side only
PROJECT, REFERENCE = "sessionstate", "openclaw"


def project_command() -> list[str]:
    return [sys.executable, "-m", "sessionstate.conformance.gateway_adapter"]


def _record(label: str) -> list[Any]:
    return ["record", {"session": CHILD, "kind": KIND, "actorType": "human", "summary": "bench"}, label]


def round_steps(events: int) -> list[list[Any]]:
    steps = [_record("record") for _ in range(events)]
    steps.append(["drain", {"watcher": MAIN}, "first drain"])  # caught up again before the pairs
    for _ in range(max(1, events // 4)):
        steps += [_record("record after a drain"), ["drain", {"watcher": MAIN}, "drain"]]
    return steps


def read_steps(events: int, head: int, project: bool) -> list[list[Any]]:
    since = max(0, head - 20)
    reads = max(1, events // 4)
    if not project:
        return [["changesSince", {"session": CHILD, "since": since}, "changesSince"]] * reads
    return ([["changesPage", {"session": CHILD, "since": since}, "changesSince"]] * reads
            + [["changesSince", {"session": CHILD, "since": since}, STATUS]] * reads
            + [["statusTool", {"caller": MAIN, "session": CHILD, "since": since}, TOOL]] * reads)


class Side:
    """One implementation behind its adapter, set up with the benchmark's session graph."""

    def __init__(self, name: str, command: list[str], labels: tuple[str, ...] = LABELS) -> None:
        self.name = name
        self.labels = labels
        self.adapter = Adapter(command, stderr=subprocess.DEVNULL, timeout=600)
        self.implementation = self.adapter.call("hello")["implementation"]
        self.adapter.call("fresh", now=START)
        self.adapter.call("create", key=MAIN)
        self.adapter.call("spawn", child=CHILD, parent=MAIN, runId="r1")
        self.adapter.call("drain", watcher=MAIN)  # the spawn's own lines, if any, out of the way
        self.micros: dict[str, list[float]] = {label: [] for label in labels}
        self.sequences: list[Any] = []

    def run_round(self, events: int) -> None:
        answer = self.adapter.call("bench", steps=round_steps(events))
        sequences = answer["sequences"]
        self.sequences += sequences
        head = max(s for s in sequences if s is not None)
        reads = self.adapter.call("bench", steps=read_steps(events, head, self.name == PROJECT))
        for part in (answer, reads):
            for label, total in part["ns"].items():
                if label in self.micros:
                    self.micros[label].append(total / part["count"][label] / 1000)

    def close(self) -> None:
        self.adapter.close()


class RawFloor:
    def __init__(self, directory: Path) -> None:
        path = directory / "raw.sqlite"
        with Gateway.open(str(path), auto_prune=False, clock=lambda: START) as gw:
            gw.create_session(f"agent:{AGENT}:main")
            gw.create_session(self.key, kind="subagent", parent=f"agent:{AGENT}:main")
        self.raw = RawLog(path)
        self.micros: list[float] = []

    key = f"agent:{AGENT}:subagent:c1"

    def run_round(self, events: int) -> None:
        record, key = self.raw.record, self.key
        began = time.perf_counter_ns()
        for _ in range(events):
            record(key)
        self.micros.append((time.perf_counter_ns() - began) / events / 1000)

    def close(self) -> None:
        self.raw.close()


def run(rounds: int, events: int, reference_command: list[str]) -> dict[str, Any]:
    sides = [Side(PROJECT, project_command(), (*LABELS, STATUS, TOOL)), Side(REFERENCE, reference_command)]
    with tempfile.TemporaryDirectory(prefix="sessionstate-side-by-side-") as tmp:
        floor = RawFloor(Path(tmp))
        try:
            for i in range(rounds):
                for side in sides if i % 2 == 0 else reversed(sides):
                    side.run_round(events)
                floor.run_round(events)
        finally:
            floor.close()
            for side in sides:
                side.close()
    project, reference = sides
    medians = {side.name: {label: statistics.median(values) for label, values in side.micros.items()} for side in sides}
    return {
        "rounds": rounds, "events": events,
        "implementations": {side.name: side.implementation for side in sides},
        "same_sequences": project.sequences == reference.sequences,
        "micros": medians,
        "raw_record_micros": statistics.median(floor.micros),
        "reference_over_project": {label: medians[REFERENCE][label] / medians[PROJECT][label] for label in LABELS},
        "project_record_over_raw": medians[PROJECT]["record"] / statistics.median(floor.micros),
    }


def table(result: dict[str, Any]) -> str:
    out = [f"{result['rounds']} rounds of {result['events']} events; medians over rounds, µs per step",
           *(f"  {name}: {text}" for name, text in result["implementations"].items()),
           "",
           f"| step | {PROJECT} | {REFERENCE} | {REFERENCE} ÷ {PROJECT} |",
           "|---|---|---|---|"]
    for label in LABELS:
        out.append(f"| {label} | {result['micros'][PROJECT][label]:.1f} | {result['micros'][REFERENCE][label]:.1f} "
                   f"| {result['reference_over_project'][label]:.2f} |")
    for label in (STATUS, TOOL):
        out.append(f"| {label} | {result['micros'][PROJECT][label]:.1f} | — | — |")
    out.append(f"\nraw sqlite3 floor, one event per transaction: {result['raw_record_micros']:.1f} µs "
               f"({PROJECT}'s record is {result['project_record_over_raw']:.2f}× it)")
    out.append("same sequences in both: " + ("yes" if result["same_sequences"] else "NO"))
    return "\n".join(out)


def main(argv: list[str]) -> int:
    options = {"--rounds": "9", "--events": "200", "--json": ""}
    for name in options:
        if name in argv:
            options[name] = argv[argv.index(name) + 1]
    reason = openclaw_install.installed()
    if reason:
        print(f"reference_side_by_side: {reason}", file=sys.stderr)
        return 2
    result = run(int(options["--rounds"]), int(options["--events"]), openclaw_install.adapter_command())
    print(table(result))
    if options["--json"]:
        Path(options["--json"]).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["same_sequences"] else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
