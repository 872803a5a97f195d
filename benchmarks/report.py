"""Turn pytest-benchmark's saved JSON into the ratio table and scaling tables.

    ./dev bench --benchmark-json=.benchmarks/latest.json
    ./dev run .venv/bin/python benchmarks/report.py .benchmarks/latest.json

Prints the tables and rewrites the generated section of docs/performance.md (between the
two ``report.py`` marker comments). With matplotlib importable it also draws the curves into
docs/performance-curves.png; without it the plot is skipped and said so.

Every figure is the median of a benchmark's rounds (robust on shared, noisy machines).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "performance.md"
PLOT = ROOT / "docs" / "performance-curves.png"
BEGIN = "<!-- report.py:begin (generated; do not edit by hand) -->"
END = "<!-- report.py:end -->"

# (label, numerator key, denominator key, target ratio or None for "report"). "key#side": the
# baseline measured in the same benchmark as key, in alternating rounds (its extra_info).
RATIOS: list[tuple[str, str, str, float | None]] = [
    ("record one material event, 3 watchers, commit per event", "record.w3.project", "record.w3.project#raw", 1.25),
    ("record one material event, 1 watcher (reference)", "record.w1.project", "record.w1.project#raw", None),
    ("same, 3 watchers, protocol trace on, vs trace off", "record.w3.traced", "record.w3.traced#project", 1.3),
    ("same, 1 watcher, protocol trace on, vs trace off", "record.w1.traced", "record.w1.traced#project", 1.3),
    ("same + 1,000 pending watchers, vs the project's own 1-watcher cost",
     "record.pending.vs_one", "record.pending.vs_one#one", 1.5),
    ("same + 1,000 pending watchers, vs raw with the same cursors", "record.pending.project", "record.pending.project#raw", None),
    ("batched append, 500 events per transaction", "batch.project", "batch.project#raw", 1.25),
    ("changesSince page of 200 at 50,000 rows", "page.full.project", "page.full.project#raw", 1.2),
    ("changesSince near-head page of 5 at 50,000 rows, first read", "page.head.project", "page.head.project#raw", 1.2),
    ("changesSince near-head page of 5 at 50,000 rows, read again (rows kept)", "page.again.project",
     "page.again.project#raw", None),
    ("drain + ack of one notice, vs one raw UPDATE + commit", "drain.project", "drain.project#raw", 2.0),
    ("prune 60,000 -> 50,000 rows", "prune.project", "prune.raw", 1.5),
    ("restart sweep, 10,000 cursors, 1,000 behind (sweep alone)", "sweep.project", "sweep.raw", None),
    ("restart: whole Gateway.open incl. sweep, vs raw sweep", "sweep.open.project", "sweep.raw", None),
    ("MCP notice poll tick (R18), 10 targets, nothing new, vs a raw SELECT of the cursors",
     "mcp.poll.project", "mcp.poll.raw", None),
    # PostgreSQL (bench_postgres.py), against raw psycopg running the same statements.
    ("PostgreSQL: record one material event, 3 watchers, commit per event", "pg.record.w3", "pg.record.w3#raw", 1.25),
    ("PostgreSQL: record one material event, 1 watcher (reference)", "pg.record.w1", "pg.record.w1#raw", None),
    ("PostgreSQL: same + 1,000 pending watchers, vs the project's own 1-watcher cost (alternating)",
     "pg.record.pending", "pg.record.pending#raw", 1.5),
    ("PostgreSQL: changesSince page of 200 at 50,000 rows", "pg.page.full", "pg.page.full#raw", 1.2),
]
LOCK_TARGET_MS = 15.0
CURVES = [
    ("table_size", "cost per event vs rows in the log (3 caught-up watchers)", "rows"),
    ("watchers_caught_up", "cost per event vs watchers on the target, all caught up", "watchers"),
    ("watchers_pending", "cost per event vs watchers on the target, all pending", "watchers"),
    ("sessions", "cost per event vs number of sessions (one watcher on each)", "sessions"),
]


def fmt_time(seconds: float) -> str:
    if seconds >= 1e-1:
        return f"{seconds * 1e3:,.0f} ms"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:,.2f} ms"
    return f"{seconds * 1e6:,.1f} µs"


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def index(data: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[int, dict[str, dict[str, Any]]]]]:
    by_key: dict[str, dict[str, Any]] = {}
    curves: dict[str, dict[int, dict[str, dict[str, Any]]]] = {}
    for bench in data["benchmarks"]:
        info = bench.get("extra_info", {})
        if "key" in info:
            by_key[info["key"]] = bench
        if "curve" in info:
            curves.setdefault(info["curve"], {}).setdefault(int(info["x"]), {})[info["side"]] = bench
    return by_key, curves


def median(bench: dict[str, Any] | None) -> float | None:
    return None if bench is None else float(bench["stats"]["median"])


def side_median(by_key: dict[str, dict[str, Any]], key: str) -> float | None:
    """A benchmark's median, or with ``#raw`` the raw median it measured alongside."""
    name, _, side = key.partition("#")
    bench = by_key.get(name)
    if side and bench is not None:
        value = bench.get("extra_info", {}).get(f"{side}_median")
        return None if value is None else float(value)
    return median(bench)


def point_median(point: dict[str, dict[str, Any]], side: str) -> float | None:
    """One side of a curve's point: its own benchmark, or the baseline the project's
    benchmark measured alongside it (``<side>_median``, alternating rounds)."""
    if side in point:
        return median(point[side])
    value = point.get("project", {}).get("extra_info", {}).get(f"{side}_median")
    return None if value is None else float(value)


def ratio_rows(by_key: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for label, num, den, target in RATIOS:
        a, b = side_median(by_key, num), side_median(by_key, den)
        if a is None or b is None:
            continue
        r = a / b
        status = "report" if target is None else ("met" if r <= target else "MISSED")
        rows.append(dict(label=label, project=a, baseline=b, ratio=r, target=target, status=status))
    return rows


def default_limits() -> dict[str, float]:
    """The documented limit of each gated path: its target in ``RATIOS`` (numerator key)."""
    return {num: target for _label, num, _den, target in RATIOS if target is not None}


def _split(text: str) -> tuple[str, float]:
    path, sep, ratio = text.partition("=")
    if not sep or not path:
        raise ValueError(f"--fail-above wants PATH=RATIO, not {text!r}")
    try:
        value = float(ratio)
    except ValueError:
        raise ValueError(f"--fail-above {text!r}: {ratio!r} is not a number") from None
    if path not in {num for _l, num, _d, _t in RATIOS}:
        raise ValueError(f"--fail-above {text!r}: unknown path; known: {', '.join(n for _l, n, _d, _t in RATIOS)}")
    return path, value


def gate_limits(options: list[str], *, defaults: bool) -> dict[str, float]:
    limits = default_limits() if defaults else {}
    limits.update(_split(o) for o in options)
    return limits


def check_gate(by_key: dict[str, dict[str, Any]], limits: dict[str, float], explicit: set[str] = frozenset()) -> list[str]:
    """One line per path whose ratio to its same-run baseline exceeds its limit. A path named
    explicitly but absent from the JSON fails too (a gate that cannot measure must not pass);
    a default limit on a path this run did not measure (e.g. PostgreSQL) is skipped."""
    out = []
    for label, num, den, _target in RATIOS:
        if num not in limits:
            continue
        a, b = side_median(by_key, num), side_median(by_key, den)
        if a is None or b is None:
            if num in explicit:
                out.append(f"GATE {num}: not measured in this JSON ({label})")
            continue
        if a / b > limits[num]:
            out.append(f"GATE {num}: {a / b:.2f}x its baseline {den} exceeds {limits[num]:g}x ({label};"
                       f" {fmt_time(a)} vs {fmt_time(b)})")
    return out


def render(data: dict[str, Any], plot_note: str) -> str:
    by_key, curves = index(data)
    smoke = any(b.get("extra_info", {}).get("smoke") for b in data["benchmarks"])
    machine = data.get("machine_info", {})
    out: list[str] = []
    out.append(
        f"Run: {data.get('datetime', '?')}, commit {data.get('commit_info', {}).get('id', '?')[:10]}"
        f"{' (dirty tree)' if data.get('commit_info', {}).get('dirty') else ''},"
        f" Python {machine.get('python_version', platform.python_version())},"
        f" SQLite {__import__('sqlite3').sqlite_version}, {machine.get('cpu', {}).get('brand_raw', machine.get('processor', '?'))}."
        " Figures are medians of each benchmark's rounds."
    )
    if smoke:
        out.append("")
        out.append("**SMOKE RUN: sizes shrunk and 2 rounds per benchmark; these numbers mean nothing.**")
    out += ["", "### Ratio table", "",
            "| path | project | raw sqlite3 (or reference) | ratio | target | status |",
            "|---|---:|---:|---:|---:|---|"]
    for row in ratio_rows(by_key):
        target = "report" if row["target"] is None else f"≤ {row['target']:g}"
        out.append(
            f"| {row['label']} | {fmt_time(row['project'])} | {fmt_time(row['baseline'])} |"
            f" {row['ratio']:.2f} | {target} | {row['status']} |"
        )
    prune_p, prune_r = by_key.get("prune.project"), by_key.get("prune.raw")
    if prune_p:
        info = prune_p["extra_info"]
        worst = info.get("longest_lock_ms_max", float("nan"))
        out.append(
            f"| prune: longest write lock of one chunk (worst of all rounds; median round"
            f" {info.get('longest_lock_ms_median', float('nan')):.1f} ms; {info.get('chunks', '?')} chunks) |"
            f" {worst:.1f} ms | {prune_r['extra_info'].get('longest_lock_ms_max', float('nan')) if prune_r else float('nan'):.1f} ms |"
            f" | ≤ {LOCK_TARGET_MS:g} ms | {'met' if worst <= LOCK_TARGET_MS else 'MISSED'} |"
        )
    pg_prune = by_key.get("pg.prune")
    if pg_prune:
        info = pg_prune["extra_info"]
        longest = info.get("longest_chunk_ms", float("nan"))
        out.append(
            f"| PostgreSQL prune {info.get('rows', 0):,} rows: longest chunk transaction ({info.get('chunks', '?')}"
            f" chunks, median {info.get('median_chunk_ms', float('nan')):.1f} ms) | {longest:.1f} ms | | | ≤ {LOCK_TARGET_MS:g} ms | {'met' if longest <= LOCK_TARGET_MS else 'MISSED'} |"
        )
    throughput = sorted(
        (b["extra_info"]["writers"], b["extra_info"]["appends_per_second"])
        for key, b in by_key.items() if key.startswith("pg.throughput.")
    )
    if throughput:
        out += ["", "### PostgreSQL: concurrent writer processes", "",
                "| writer processes | appends per second (all writers) | per writer |", "|---:|---:|---:|"]
        out += [f"| {n} | {rate:,.0f} | {rate / n:,.0f} |" for n, rate in throughput]
    extra = []
    batch, plain = by_key.get("batch.project"), side_median(by_key, "batch.project#raw")
    if batch and plain:
        n = batch["extra_info"].get("events", 500)
        extra.append(
            f"- Batched append: {fmt_time(median(batch) / n)} per event in the project"
            f" (`Gateway.record_events`, one transaction), {fmt_time(plain / n)} raw."
        )
    mem = by_key.get("memory.open_pending")
    if mem:
        info = mem["extra_info"]
        extra.append(
            f"- Memory with {info['cursors']:,} cursors: {info['python_bytes_per_caught_up_cursor']:.2f} Python bytes"
            f" per caught-up cursor, {info['python_bytes_per_pending_cursor']:.0f} per pending cursor (its queued"
            f" notice line), {info['file_bytes_per_cursor']:.0f} file bytes per cursor; {info['machines_alive']}"
            f" `transitions.Machine` alive (the module's `MACHINE`: {info['machine_is_the_module_one']},"
            f" {info['machine_models']} models bound); opening with all of them pending takes {fmt_time(median(mem))}."
        )
    if extra:
        out += ["", *extra]
    for name, title, xlabel in CURVES:
        points = curves.get(name)
        if not points:
            continue
        out += ["", f"### Scaling: {title}", "", f"| {xlabel} | project per event | raw per event | ratio |", "|---:|---:|---:|---:|"]
        for x in sorted(points):
            p, r = point_median(points[x], "project"), point_median(points[x], "raw")
            ratio = f"{p / r:.2f}" if p and r else "–"
            out.append(f"| {x:,} | {fmt_time(p) if p else '–'} | {fmt_time(r) if r else '–'} | {ratio} |")
    out += ["", plot_note]
    return "\n".join(out)


def plot(data: dict[str, Any], target: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "_(No plot: matplotlib is not installed; `pip install matplotlib` and rerun report.py to draw one.)_"
    _, curves = index(data)
    names = [c for c in CURVES if c[0] in curves]
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.6), squeeze=False)
    for ax, (name, title, xlabel) in zip(axes[0], names):
        points = curves[name]
        xs = sorted(points)
        for side in ("project", "raw"):
            ys = [point_median(points[x], side) for x in xs]
            ax.plot(xs, [y * 1e6 if y else None for y in ys], marker="o", label=side)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("µs per event (median)")
        ax.set_title(title, fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    return f"![scaling curves]({target.name})"


def rewrite(doc: Path, section: str) -> None:
    text = doc.read_text() if doc.exists() else "# Performance\n"
    block = f"{BEGIN}\n{section}\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", type=Path, help="pytest-benchmark JSON (--benchmark-json)")
    parser.add_argument("--doc", type=Path, default=DOC, help="markdown file whose generated section is rewritten")
    parser.add_argument("--no-write", action="store_true", help="print only; touch no file")
    parser.add_argument("--fail-above", action="append", default=[], metavar="PATH=RATIO",
                        help="exit 1 when benchmark PATH (its key, e.g. record.w3.project) is more than RATIO"
                             " times its baseline of the same run (repeatable)")
    parser.add_argument("--gate", action="store_true",
                        help="use every path's documented target (the RATIOS table) as its --fail-above limit")
    args = parser.parse_args(argv)
    try:
        limits = gate_limits(args.fail_above, defaults=args.gate)
    except ValueError as exc:
        parser.error(str(exc))
    data = load(args.json)
    if limits:
        failures = check_gate(index(data)[0], limits, explicit={k for k, _ in map(_split, args.fail_above)})
        for line in failures:
            print(line, file=sys.stderr)
        if args.no_write or failures:
            print(f"benchmark gate: {len(limits)} path(s) checked, {len(failures)} over the limit", file=sys.stderr)
        if failures:
            return 1
    note = "_(Plot not written: --no-write.)_" if args.no_write else plot(data, args.doc.parent / PLOT.name)
    section = render(data, note)
    print(section)
    if not args.no_write:
        rewrite(args.doc, section)
        print(f"\nwrote {args.doc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
