"""Two gateway processes on one database, appending to overlapping sessions.

The database is a temporary SQLite file, or a fresh one on the backend ``./dev trials
--db URL`` names (scratch.py).

Checks: no sequence handed to both processes; every acknowledged event present with its
session; each head equals the largest sequence of its session; no exception (``database is
locked`` included) escaped to a caller and ``stats["append_failures"]`` is 0 in both; every
process exited cleanly. Reports throughput (acknowledged appends per wall-clock second).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from sessionstate.facade.gateway import Gateway
from . import worker, worker_env
from .scratch import scratch_database
from .workload import SESSIONS, ensure_sessions


@dataclass
class ConcurrencyReport:
    processes: int
    events_per_process: int
    appended: int = 0
    seconds: float = 0.0
    append_failures: int = 0
    interleavings: int = 0  # owner changes along the sequence order: proof the two overlapped
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def throughput(self) -> float:
        return self.appended / self.seconds if self.seconds else 0.0


def run_concurrency(events: int, *, processes: int = 2, seed: int = 0, directory: Path | None = None,
                    database: str | None = None) -> ConcurrencyReport:
    report = ConcurrencyReport(processes, events)
    with tempfile.TemporaryDirectory(prefix="sessionstate-concurrency-", dir=directory) as tmp, \
            scratch_database(database, Path(tmp)) as url:
        with Gateway.open(url) as gw:
            ensure_sessions(gw)
        start = time.time() + 1.5  # both children are importing and opening by then
        outs = [Path(tmp) / f"worker{i}.json" for i in range(processes)]
        children = [
            subprocess.Popen(
                worker("concurrency_worker", url, str(out),
                 str(seed * 1000 + i), str(events), str(start), str(i), str(processes)), env=worker_env(),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            for i, out in enumerate(outs)
        ]
        results = []
        for i, child in enumerate(children):
            _, stderr = child.communicate(timeout=1800)
            if child.returncode != 0 or not outs[i].exists():
                report.failures.append(f"worker {i} exited {child.returncode}: {stderr[-2000:]}")
                continue
            results.append(json.loads(outs[i].read_text(encoding="utf-8")))
        if report.failures:
            return report
        report.seconds = max(r["seconds"] for r in results)
        owner: dict[int, str] = {}
        for i, result in enumerate(results):
            report.append_failures += result["stats"]["append_failures"]
            for text in result["escaped"]:
                report.failures.append(f"worker {i}: exception escaped to the caller: {text}")
            for seq, session in result["acknowledged"]:
                if seq in owner:
                    report.failures.append(f"sequence {seq} acknowledged twice ({owner[seq]}, worker {i} {session})")
                owner[seq] = f"worker {i} {session}"
            report.appended += len(result["acknowledged"])
        ordered = [owner[seq].split()[1] for seq in sorted(owner)]
        report.interleavings = sum(a != b for a, b in zip(ordered, ordered[1:]))
        if report.interleavings == 0:
            report.failures.append("the processes never interleaved: nothing concurrent was tested")
        if report.append_failures:
            report.failures.append(f"{report.append_failures} append(s) failed (record_event returned None)")
        report.failures += _check_file(url, results)
    return report


def _check_file(url: str, results: list[dict]) -> list[str]:
    out: list[str] = []
    with Gateway.open(url) as gw:
        rows = {row[0]: row[1] for row in gw.store.dump()["session_state_events"]}
        for result in results:
            for seq, session in result["acknowledged"]:
                if rows.get(seq) != session:
                    out.append(f"acknowledged event {seq} of {session} is {rows.get(seq)!r} in the file")
        for session in SESSIONS:
            mine = [s for s, k in rows.items() if k == session]
            version = gw.ops.state_version(session)
            if version != (max(mine) if mine else 0):
                out.append(f"head of {session} is {version}, its newest event {max(mine, default=0)}")
        if gw.store.integrity_check() != "ok":
            out.append("integrity_check failed")
    return out[:50]


if __name__ == "__main__":  # pragma: no cover
    result = run_concurrency(int(sys.argv[1]) if len(sys.argv) > 1 else 500)
    print(result, f"{result.throughput:.0f} appends/s")
    sys.exit(0 if result.ok else 1)
