"""Reading protocol traces: lines, cut files, and the merge of several processes by commit order.

A trace file holds batches of lines from one or more gateways (spec section 15). Lines are
grouped into *units*: the lines of one gateway with one transaction number (a committed
transaction's steps and the notices queued after that commit). Units of one gateway are in
file order; units of different gateways are merged on the commit key ``c``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..shared.formats import TRACE_VERSION

Proc = tuple[int, str]  # (process id, gateway instance)
_PREFIX = re.compile(r'^\{"v":\d+,"pid":(\d+),"gw":"(\w+)","n":\d+,"tx":(\d+),')
COMMON_FIELDS = ("v", "pid", "gw", "n", "tx", "c", "op")


class TraceFormatError(Exception):
    """A line that is not a trace line of a known version (rule T1)."""

    def __init__(self, source: str, lineno: int, message: str) -> None:
        super().__init__(f"{source}:{lineno}: {message}")
        self.source = source
        self.lineno = lineno
        self.message = message


class TraceOrderError(Exception):
    """Lines of one process out of its batch order within a file (rule T2)."""

    def __init__(self, line: "TraceLine", message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


@dataclass(frozen=True)
class TraceLine:
    source: str
    lineno: int
    data: dict[str, Any]

    @property
    def proc(self) -> Proc:
        return (int(self.data["pid"]), str(self.data["gw"]))

    @property
    def op(self) -> str:
        return str(self.data["op"])

    def where(self) -> str:
        return f"{self.source}:{self.lineno}"


@dataclass
class Unit:
    """One gateway's lines with one transaction number."""

    proc: Proc
    tx: int
    commit_key: int
    batch: int  # the process's batch counter of the unit's first line
    lines: list[TraceLine] = field(default_factory=list)
    complete: bool = True  # False for the unit a cut line belonged to

    def has_event(self, sequence: int) -> bool:
        return any(line.op == "event" and line.data.get("seq") == sequence for line in self.lines)


@dataclass
class Cut:
    """A line a crash cut short: ignored. Its unit (when its prefix is readable) is incomplete."""

    lineno: int
    unit: tuple[Proc, int] | None
    lines_before: int  # how many full lines of the file came before it


@dataclass
class TraceFile:
    source: str
    lines: list[TraceLine]
    cuts: list[Cut] = field(default_factory=list)

    @property
    def cut(self) -> bool:
        return bool(self.cuts)


def read_trace(path: Path, progress: Callable[[int], None] | None = None) -> TraceFile:
    """Parse one file. A line cut short by a crash is not an error: at the end of the file it
    lacks its newline; inside the file (a restarted process appended to the same file) the next
    line is glued to it, and a line starts only where ``{"v":`` does."""
    trace = TraceFile(str(path), [])
    with open(path, "rb") as handle:
        for lineno, raw in enumerate(handle, start=1):
            if progress is not None:
                progress(len(raw))
            text = raw.decode("utf-8", "replace")
            if not text.endswith("\n"):
                trace.cuts.append(_cut(text, lineno, len(trace.lines)))
                break
            text = text.strip()
            if not text:
                continue
            glued = text.find(_LINE_START, 1)
            if glued > 0:
                try:
                    json.loads(text)
                except json.JSONDecodeError:
                    trace.cuts.append(_cut(text[:glued], lineno, len(trace.lines)))
                    text = text[glued:]
            trace.lines.append(TraceLine(trace.source, lineno, _parse(trace.source, lineno, text)))
    return trace


_LINE_START = '{"v":'  # inside a line a brace and quotes are always escaped


def _cut(fragment: str, lineno: int, lines_before: int) -> Cut:
    match = _PREFIX.match(fragment)
    return Cut(lineno, ((int(match[1]), match[2]), int(match[3])) if match else None, lines_before)


def _parse(source: str, lineno: int, text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(source, lineno, f"not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise TraceFormatError(source, lineno, "not a JSON object")
    missing = [name for name in COMMON_FIELDS if name not in data]
    if missing:
        raise TraceFormatError(source, lineno, f"missing fields {missing}")
    if data["v"] != TRACE_VERSION:
        raise TraceFormatError(source, lineno, f"trace format version {data['v']!r}; this replay reads {TRACE_VERSION}")
    for name in ("pid", "n", "tx", "c"):
        if not isinstance(data[name], int) or isinstance(data[name], bool):
            raise TraceFormatError(source, lineno, f"{name!r} must be an integer")
    return data


def units_of(files: list[TraceFile]) -> dict[int, list[Unit]]:
    """Each process's units in its batch order (``n``), across all files."""
    units: dict[tuple[Proc, int], Unit] = {}
    for trace in files:
        last_batch: dict[int, int] = {}
        for line in trace.lines:
            proc, tx, batch = line.proc, int(line.data["tx"]), int(line.data["n"])
            if batch < last_batch.get(proc[0], 0):
                raise TraceOrderError(line, f"batch {batch} of process {proc[0]} comes after its batch"
                                            f" {last_batch[proc[0]]} in the file")
            last_batch[proc[0]] = batch
            unit = units.get((proc, tx))
            if unit is None:
                unit = units[(proc, tx)] = Unit(proc, tx, int(line.data["c"]), batch)
            unit.lines.append(line)
        for cut in trace.cuts:
            if cut.unit is not None and cut.unit in units:
                units[cut.unit].complete = False
            elif cut.unit is None and cut.lines_before:
                last = trace.lines[cut.lines_before - 1]  # the cut line's gateway is unknown: be lenient
                units[(last.proc, int(last.data["tx"]))].complete = False
    by_pid: dict[int, list[Unit]] = {}
    for unit in units.values():
        by_pid.setdefault(unit.proc[0], []).append(unit)
    for pid_units in by_pid.values():
        pid_units.sort(key=lambda u: u.batch)
    return by_pid


Overlay = dict[Any, Any]  # pair -> positions after a unit (the checker's own types)


def merge(
    by_proc: dict[int, list[Unit]],
    fits: Callable[[Unit, Overlay], bool],
    outcome: Callable[[Unit], Overlay],
) -> Iterator[Unit]:
    """All units in commit order (spec 12.3).

    The smallest commit key goes first; at equal keys the unit holding the event with that
    sequence goes first (it committed it; the others read it). Units left tied (transactions
    without events, in different processes, that read the same high-water mark) are ordered by
    the pairs' positions: a unit ``fits`` when its first step on each pair starts from that
    pair's current positions (and a startup sweep covers every pending pair). Preferred is a
    unit that fits after which every other tied unit still fits (``outcome`` gives the
    positions a unit leaves); then any unit that fits; then the first, which will fail.
    """
    cursors = {proc: 0 for proc in by_proc}
    order = sorted(by_proc)
    while True:
        heads = [(proc, by_proc[proc][cursors[proc]]) for proc in order if cursors[proc] < len(by_proc[proc])]
        if not heads:
            return
        best = min((unit.commit_key, 0 if unit.has_event(unit.commit_key) else 1) for _, unit in heads)
        tied = [(proc, unit) for proc, unit in heads
                if (unit.commit_key, 0 if unit.has_event(unit.commit_key) else 1) == best]
        choice = tied[0]
        if len(tied) > 1:
            # Each process's run of units tied at this key, in its own order: a candidate must
            # leave every other process's whole run fitting, not only its next unit.
            runs = {proc: _tied_run(by_proc[proc], cursors[proc], best) for proc, _ in tied}
            fitting = [(p, u) for p, u in tied if fits(u, {})]
            for candidate in fitting:
                after = outcome(candidate[1])
                if all(_run_fits(runs[p], after, fits, outcome) for p, _ in tied if p != candidate[0]):
                    choice = candidate
                    break
            else:
                choice = fitting[0] if fitting else tied[0]
        proc, unit = choice
        cursors[proc] += 1
        yield unit


def _tied_run(units: list[Unit], start: int, key: tuple[int, int]) -> list[Unit]:
    run: list[Unit] = []
    for unit in units[start:]:
        if (unit.commit_key, 0 if unit.has_event(unit.commit_key) else 1) != key:
            break
        run.append(unit)
    return run


def _run_fits(run: list[Unit], overlay: Overlay, fits: Callable[[Unit, Overlay], bool],
              outcome: Callable[[Unit], Overlay]) -> bool:
    """Do a process's tied units still fit, one after the other, from ``overlay``?"""
    positions = dict(overlay)
    for unit in run:
        if not fits(unit, positions):
            return False
        positions.update(outcome(unit))
    return True
