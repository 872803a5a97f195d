"""``sessionstate replay TRACE [TRACE ...]``: check protocol traces, print a summary or the violation."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from .trace_check import Summary, TraceChecker, Violation
from .trace_read import TraceFile, TraceFormatError, read_trace

AUTO_PROGRESS_BYTES = 1 << 20  # a bar for inputs of a mebibyte or more, on a terminal


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("traces", nargs="+", type=Path, metavar="TRACE",
                        help="trace files (JSON Lines); several processes' files are merged by commit order")
    parser.add_argument("--context", type=int, default=10, metavar="N",
                        help="lines shown before a violation (default 10)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="a progress bar on stderr (default: on a terminal, for inputs of 1 MiB or more)")
    parser.add_argument("--junit-xml", type=Path, default=None, metavar="PATH",
                        help="write JUnit XML: one test case per trace check, the broken rule's case failing")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="write a JSON summary (lines, steps, pairs, the violation)")


def run_replay(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Check the traces; with ``--junit-xml``/``--json`` also write the results (results.py)."""
    import io
    import time

    from .results import Case, Results

    if getattr(args, "junit_xml", None) is None and getattr(args, "json", None) is None:
        return _run_replay(args, out, err)
    out = out or sys.stdout
    buffer = io.StringIO()
    started = time.monotonic()
    status = _run_replay(args, buffer, err)
    text = buffer.getvalue()
    out.write(text)
    rec = Results("replay")
    first = text.splitlines()[0] if text else ""
    rule = first.split()[1] if first.startswith("VIOLATION ") else None
    for path in args.traces:
        rec.cases.append(Case("replay", str(path), time.monotonic() - started,
                              failure=text if status else None))
    if rule is not None:
        rec.cases.append(Case("replay", rule, failure=text))
    rec.stats["replay"] = {"status": status, "output": text.splitlines()}
    if args.junit_xml:
        rec.write_junit(args.junit_xml)
    if args.json:
        rec.write_json(args.json)
    return status


class ProgressBar:
    """A one-line bar on a stream, redrawn when the whole percent changes."""

    def __init__(self, label: str, total: int, stream: TextIO) -> None:
        self.label, self.total, self.stream = label, max(total, 1), stream
        self.done = 0
        self._shown = -1

    def advance(self, amount: int = 1) -> None:
        self.done += amount
        percent = min(100, self.done * 100 // self.total)
        if percent != self._shown:
            self._shown = percent
            filled = percent * 30 // 100
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {percent:3d}%")
            self.stream.flush()

    def finish(self) -> None:
        if self._shown >= 0:
            self.stream.write("\n")
            self.stream.flush()


def _run_replay(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    paths: list[Path] = args.traces
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"sessionstate replay: no such trace file: {', '.join(missing)}", file=err)
        return 2
    total = sum(p.stat().st_size for p in paths)
    show = args.progress if args.progress is not None else (err.isatty() and total >= AUTO_PROGRESS_BYTES)
    files: list[TraceFile] = []
    try:
        bar = ProgressBar("reading ", total, err) if show else None
        for path in paths:
            files.append(read_trace(path, bar.advance if bar else None))
        if bar:
            bar.finish()
    except TraceFormatError as exc:
        print(f"VIOLATION T1 (trace format): {exc}", file=out)
        return 1
    checker = TraceChecker()
    units = 0
    if show:
        from .trace_read import units_of

        units = sum(len(u) for u in units_of(files).values())
    bar = ProgressBar("checking", units, err) if show else None
    try:
        summary = checker.run(files, bar.advance if bar else None)
    except Violation as violation:
        if bar:
            bar.finish()
        _report_violation(violation, args.context, out)
        _print_summary(checker.summary, out)
        return 1
    if bar:
        bar.finish()
    _print_summary(summary, out)
    print("OK: every step is a legal transition with its effect's positions and notice; no invariant broken",
          file=out)
    return 0


def _report_violation(violation: Violation, context: int, out: TextIO) -> None:
    print(f"VIOLATION {violation.rule}: {violation.message}", file=out)
    if violation.line is not None:
        print(f"  at {violation.line.where()}", file=out)
    lines = violation.context[-context:] if context > 0 else []
    if lines:
        print("  the steps that led there:", file=out)
        for line in lines:
            print(f"    {line.where()}: {_brief(line.data)}", file=out)
    if violation.line is not None:
        print(f"  ->  {violation.line.where()}: {_brief(violation.line.data)}", file=out)


def _brief(data: dict[str, object]) -> str:
    return " ".join(f"{k}={v}" for k, v in data.items() if k not in ("v", "pid", "gw"))


def _print_summary(summary: Summary, out: TextIO) -> None:
    print(
        f"{summary.files} trace file(s): {summary.lines} lines in {summary.units} transactions;"
        f" {summary.steps} steps on {len(summary.pairs)} pairs, {summary.events} events,"
        f" {summary.notices} notices; {len(summary.processes)} process(es), {len(summary.gateways)} gateway(s)",
        file=out,
    )
    if summary.resynced:
        print(f"resynchronised: {summary.resynced} pair(s) taken again from their next step after a gateway"
              " ended without closing (its last batch may have been lost in a crash)", file=out)
    for where in summary.cut:
        print(f"cut: {where}: a line cut short (a crash while writing); the full lines around it were read",
              file=out)
