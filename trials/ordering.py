"""Writers and readers in separate processes on one database: ordering and cursor consistency.

``writers`` processes append to shared targets (every writer) and to a target of their own,
drain and sweep their own watcher's notices, and watch/unwatch; ``readers`` processes poll
``session_status changesSince`` on every target the way an agent does (from the largest
sequence they have seen). Checks (spec section 16, C1 and C2):

- no reader ever misses an event that commits below a sequence it had already seen for that
  session (it would have been skipped for good);
- every page is ascending and above its ``changesSince``;
- no event lost or doubled: the log holds exactly the acknowledged appends, each sequence once,
  and each session's one `created` (R27), its first event;
- each head equals its session's newest sequence (INV7);
- every cursor ends consistent: L <= N <= M, L = N implies N = M (INV1), and a caught-up
  cursor has no notifying event by another actor above L on its target (INV6);
- no exception escaped to a caller and no append failed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sessionstate.errors import SessionExists
from sessionstate.facade.gateway import Gateway
from sessionstate.statemachine import NOTIFYING_KINDS
from . import worker, worker_env

SHARED = ("agent:t:shared0", "agent:t:shared1")


def own_target(index: int) -> str:
    return f"agent:t:own{index}"


def watcher(index: int) -> str:
    return f"agent:w{index}:main"


def watched_by(index: int, writers: int) -> tuple[str, ...]:
    """Watcher i watches the shared targets, its own and its neighbour's (another writer's)."""
    return SHARED + (own_target(index), own_target((index + 1) % writers))


def all_targets(writers: int) -> tuple[str, ...]:
    return SHARED + tuple(own_target(i) for i in range(writers))


def prepare(gw: Gateway, writers: int) -> None:
    for key in all_targets(writers) + tuple(watcher(i) for i in range(writers)):
        try:
            gw.create_session(key)
        except SessionExists:
            pass
    for i in range(writers):
        for target in watched_by(i, writers):
            gw.watch(watcher(i), target)


@dataclass
class OrderingReport:
    writers: int
    readers: int
    events_per_writer: int
    appended: int = 0
    polls: int = 0
    interleavings: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def run_ordering(url: str, *, writers: int = 4, readers: int = 2, events: int = 200, seed: int = 0,
                 directory: Path | None = None) -> OrderingReport:
    """Run the trial on ``url`` (an empty database: the trial owns it)."""
    report = OrderingReport(writers, readers, events)
    with Gateway.open(url) as gw:
        prepare(gw, writers)
    with tempfile.TemporaryDirectory(prefix="sessionstate-ordering-", dir=directory) as tmp:
        stop = Path(tmp) / "stop"
        start = time.time() + 2.0  # every child has imported and opened by then
        began = time.monotonic()

        def spawn(role: str, index: int) -> tuple[subprocess.Popen[str], Path]:
            out = Path(tmp) / f"{role}{index}.json"
            child = subprocess.Popen(
                worker("ordering_worker", role, url, str(out),
                 str(seed * 1000 + index), str(events), str(index), str(writers), str(stop), str(start)), env=worker_env(),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            return child, out

        writer_procs = [spawn("writer", i) for i in range(writers)]
        reader_procs = [spawn("reader", i) for i in range(readers)]
        writes = _collect(writer_procs, "writer", report)
        stop.touch()
        reads = _collect(reader_procs, "reader", report)
        report.seconds = time.monotonic() - began
    if report.failures:
        return report
    report.failures += check_outcome(url, writers, writes, reads, report)
    return report


def _collect(procs: list[tuple[subprocess.Popen[str], Path]], role: str, report: OrderingReport) -> list[dict[str, Any]]:
    results = []
    for i, (child, out) in enumerate(procs):
        _, stderr = child.communicate(timeout=1800)
        if child.returncode != 0 or not out.exists():
            report.failures.append(f"{role} {i} exited {child.returncode}: {stderr[-2000:]}")
            continue
        result = json.loads(out.read_text(encoding="utf-8"))
        for text in result["escaped"]:
            report.failures.append(f"{role} {i}: exception escaped to the caller: {text}")
        for text in result.get("violations", []):
            report.failures.append(f"{role} {i}: {text}")
        if result.get("append_failures"):
            report.failures.append(f"{role} {i}: {result['append_failures']} append(s) failed")
        results.append(result)
    return results


def check_outcome(url: str, writers: int, writes: list[dict[str, Any]], reads: list[dict[str, Any]],
           report: OrderingReport) -> list[str]:
    out: list[str] = []
    owner: dict[int, tuple[int, str]] = {}
    for i, result in enumerate(writes):
        for seq, session in result["acknowledged"]:
            if seq in owner:
                out.append(f"sequence {seq} acknowledged twice ({owner[seq]} and writer {i})")
            owner[seq] = (i, session)
    report.appended = len(owner)
    ordered = [owner[seq][0] for seq in sorted(owner)]
    report.interleavings = sum(a != b for a, b in zip(ordered, ordered[1:]))
    if report.interleavings == 0:
        out.append("the writers never interleaved: nothing concurrent was tested")
    with Gateway.open(url) as gw:
        log: dict[str, list[tuple[int, str, str | None]]] = {}
        for key in all_targets(writers) + tuple(watcher(i) for i in range(writers)):
            events = []
            after = 0
            while True:
                page = gw.store.events_after(key, key.split(":")[1], after, 1000)
                if not page:
                    break
                events += [(e.sequence, e.kind, e.actor_id) for e in page]
                after = page[-1].sequence
            log[key] = events
            newest = events[-1][0] if events else 0
            if gw.ops.state_version(key) != newest:
                out.append(f"head of {key} is {gw.ops.state_version(key)}, its newest event {newest} (INV7)")
        in_log = {seq: key for key, events in log.items() for seq, _, _ in events}
        for seq, (i, session) in owner.items():
            if in_log.get(seq) != session:
                out.append(f"acknowledged event {seq} of {session} (writer {i}) is {in_log.get(seq)!r} in the log")
        # R27: each session's own `created` (log-only) comes first, written by the preparation.
        created = {seq for events in log.values() for seq, kind, _ in events if kind == "created"}
        for key, events in log.items():
            if [kind for _, kind, _ in events].count("created") != 1 or events[0][1] != "created":
                out.append(f"{key} does not open with exactly one created event (R27)")
        extra = sorted(set(in_log) - set(owner) - created)
        if extra:
            out.append(f"{len(extra)} event(s) in the log nobody acknowledged: {extra[:10]}")
        for r, result in enumerate(reads):
            report.polls += result["polls"]
            for key, seen_list in result["seen"].items():
                seen = set(seen_list)
                top = max(seen, default=0)
                skipped = [seq for seq, _, _ in log[key] if seq <= top and seq not in seen]
                if skipped:
                    out.append(f"reader {r} skipped {key} events {skipped[:10]}: they committed after a larger"
                               " sequence had been read (C1)")
        for record in gw.store.all_cursors():
            last_seen, notified, material = record.positions
            name = f"cursor {record.watcher} -> {record.target_key} {record.positions}"
            if not (last_seen <= notified <= material) or (last_seen == notified and notified != material):
                out.append(f"{name} breaks INV1")
            if last_seen == notified:
                uncovered = [seq for seq, kind, actor in log.get(record.target_key, [])
                             if seq > last_seen and kind in NOTIFYING_KINDS and actor != record.watcher]
                if uncovered:
                    out.append(f"{name} is caught up but events {uncovered[:10]} are uncovered (INV6)")
        if gw.store.integrity_check() != "ok":
            out.append(f"integrity check: {gw.store.integrity_check()}")
    return out[:50]


if __name__ == "__main__":  # pragma: no cover
    result = run_ordering(sys.argv[1], events=int(sys.argv[2]) if len(sys.argv) > 2 else 200)
    print(result)
    sys.exit(0 if result.ok else 1)
