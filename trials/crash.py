"""Crash tests: SIGKILL a worker at a random moment, reopen, check what survived.

All trials share one database file (crash after crash, as a real gateway would live). After
each kill the parent reopens the file with ``Gateway.open`` (the startup sweep runs) and checks:

- the store's integrity check is ``ok`` (``PRAGMA integrity_check`` on SQLite);
- every append acknowledged in the side log is present with its session, or was pruned: its
  sequence is at or below the session's durable ``pruned_max_sequence`` (pruning is random in
  the worker; the watermark accounts for it exactly, INV8);
- heads never decrease across crashes and are >= every retained and acknowledged sequence;
- every cursor with effective material > last_seen yields exactly one notice on the drain
  (saying ``changesSince`` L), and no other cursor yields any.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from sessionstate.facade.gateway import Gateway
from sessionstate.shared.formats import notice_text
from . import worker, worker_env
from .scratch import scratch_database
from .workload import SESSIONS


@dataclass
class CrashReport:
    trials: int = 0
    acknowledged: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures


def read_sidelog(path: Path) -> list[tuple[int, str]]:
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        parts = line.split()
        # A line without its newline was torn by the kill: that append was never acknowledged.
        if line.endswith("\n") and len(parts) == 2 and parts[0].isdigit():
            entries.append((int(parts[0]), parts[1]))
    return entries


def check_after_crash(url: str, sidelog: Path, seen_heads: dict[str, int]) -> list[str]:
    out: list[str] = []
    with Gateway.open(url) as gw:
        integrity = gw.store.integrity_check()
        if integrity != "ok":
            out.append(f"integrity_check: {integrity}")
        rows = [(row[0], row[1]) for row in gw.store.dump()["session_state_events"]]
        present = dict(rows)
        heads = {k: gw.store.head(*gw.ops.resolve(k)) for k in SESSIONS if gw.ops.session_exists(k)}
        for seq, session in read_sidelog(sidelog):
            head = heads.get(session)
            if present.get(seq) == session:
                continue
            if seq in present:
                out.append(f"acknowledged event {seq} of {session} belongs to {present[seq]}")
            elif head is None or seq > head.pruned_max_sequence:
                out.append(f"acknowledged event {seq} of {session} is lost (pruned watermark "
                           f"{head.pruned_max_sequence if head else None})")
            if head is not None and head.last_sequence < seq:
                out.append(f"head of {session} ({head.last_sequence}) is below acknowledged {seq}")
        for session, head in heads.items():
            assert head is not None, f"{session} exists without a head row"  # insert_session writes both
            retained = [s for s, k in rows if k == session]
            if retained and max(retained) > head.last_sequence:
                out.append(f"head of {session} ({head.last_sequence}) below retained {max(retained)}")
            if head.last_sequence < seen_heads.get(session, 0):
                out.append(f"head of {session} fell {seen_heads[session]} -> {head.last_sequence}")
            seen_heads[session] = head.last_sequence
        out += _check_sweep(gw)
    return out


def _check_sweep(gw: Gateway) -> list[str]:
    out: list[str] = []
    owed: dict[str, list[str]] = {}
    for record in gw.store.all_cursors():
        last, _notified, material = record.positions
        if material > last:
            owed.setdefault(record.watcher, []).append(notice_text(record.target_key, last))
    for watcher in SESSIONS:
        if not gw.ops.session_exists(watcher):
            continue
        drained = gw.drain_system_events(watcher)
        want = sorted(owed.get(watcher, []))
        if sorted(drained) != want:
            out.append(f"after the sweep {watcher} drained {sorted(drained)}, owed {want}")
    return out


def run_trials(
    trials: int,
    *,
    seed: int = 0,
    directory: Path | None = None,
    kill_window: tuple[float, float] = (0.05, 0.6),
    progress: Callable[[int, int], object] | None = None,
    database: str | None = None,
) -> CrashReport:
    """``trials`` kills of a worker on one database: a temporary SQLite file, or a fresh
    database on the backend of ``database`` (see ``scratch.py``)."""
    started = time.monotonic()
    report = CrashReport()
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="sessionstate-crash-", dir=directory) as tmp, \
            scratch_database(database, Path(tmp)) as url:
        sidelog = Path(tmp) / "acknowledged.log"
        sidelog.touch()
        seen_heads: dict[str, int] = {}
        for trial in range(trials):
            child_seed = rng.randrange(2**32)
            child = subprocess.Popen(
                worker("crash_worker", url, str(sidelog), str(child_seed)), env=worker_env(),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            # Half the kills land while the child is still opening (sweep, watches).
            if rng.random() < 0.5 and child.stdout is not None:
                child.stdout.readline()
            time.sleep(rng.uniform(*kill_window))
            child.send_signal(signal.SIGKILL)
            _, stderr = child.communicate()
            if child.returncode != -signal.SIGKILL:
                report.failures.append(f"trial {trial}: worker exited {child.returncode} before the kill: {stderr[-2000:]}")
                break
            failures = check_after_crash(url, sidelog, seen_heads)
            report.failures += [f"trial {trial} (worker seed {child_seed}): {f}" for f in failures]
            report.trials += 1
            if progress is not None:
                progress(trial + 1, trials)
            if failures:
                break
        report.acknowledged = len(read_sidelog(sidelog))
    report.seconds = time.monotonic() - started
    return report


if __name__ == "__main__":  # pragma: no cover
    result = run_trials(int(sys.argv[1]) if len(sys.argv) > 1 else 3, seed=int(os.environ.get("SEED", "0")))
    print(result)
    sys.exit(0 if result.ok else 1)
