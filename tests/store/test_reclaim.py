"""Space: pruning gives pages back (new files), in bounded steps; `sessionstate vacuum` converts
older files once, and compacts a database on every backend through the store interface."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from sessionstate import Gateway
from sessionstate.errors import StorageUnavailable
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import open_store
from sessionstate.store.sqlite import AUTO_VACUUM_INCREMENTAL
from tests.backends import Backend

MAIN = "agent:main:main"
EVENTS = 12_000
KEEP = 1_000


def fill(gw: Gateway, count: int = EVENTS) -> None:
    """MAIN with ``count`` compacted events after its own `created` (R27): ``count + 1`` rows."""
    gw.create_session(MAIN)
    burst = [dict(session_key=MAIN, kind="compacted", actor_type="system", summary="s" * 120)] * 500
    for _ in range(count // len(burst)):
        assert None not in gw.record_events(burst)


def file_bytes(path: Path) -> int:
    return path.stat().st_size


def older_file(path: Path) -> None:
    """A file as an earlier release left it: auto-vacuum off (fixed once the first page exists)."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (body TEXT)")
    db.close()


def test_new_files_use_incremental_auto_vacuum(tmp_path):
    with Gateway.open(str(tmp_path / "state.db")) as gw:
        assert gw.store.pragma("auto_vacuum") == AUTO_VACUUM_INCREMENTAL


def test_prune_reclaims_pages_and_the_file_shrinks(tmp_path):
    path = tmp_path / "state.db"
    with Gateway.open(str(path), max_rows=KEEP) as gw:
        fill(gw)
        busy, frames, copied = gw.store.checkpoint()
        assert busy == 0 and copied == frames  # the file holds every page, free ones included
        full = file_bytes(path)
        counts = gw.prune()
        assert counts["events"] == EVENTS + 1 - KEEP
        assert counts["pages_reclaimed"] > 0
        assert gw.store.pragma("freelist_count") == 0
        assert gw.store.integrity_check() == "ok"
        assert gw.ops.state_version(MAIN) == EVENTS + 1  # heads survive
    # Closing checkpoints the WAL: the file is the kept rows' size, not the full one's.
    assert file_bytes(path) < full / 4, (full, file_bytes(path))


def test_reclaiming_runs_in_bounded_steps_each_its_own_transaction(tmp_path):
    with Gateway.open(str(tmp_path / "state.db"), max_rows=KEEP) as gw:
        fill(gw)
        gw.store.prune_events(cutoff=0, max_rows=KEEP)
        free = gw.store.pragma("freelist_count")
        with gw.store.trace_statements() as statements:
            assert gw.store.reclaim_free_pages(step_pages=16) == free
    # Transactions: each BEGIN IMMEDIATE ... COMMIT frees at most 16 pages, and they free all.
    transactions: list[int] = []
    for sql in statements:
        if sql == "BEGIN IMMEDIATE":
            transactions.append(0)
        elif sql.startswith("PRAGMA incremental_vacuum"):
            assert sql == "PRAGMA incremental_vacuum(1)"
            transactions[-1] += 1
    assert sum(transactions) == free and max(transactions) == 16
    assert len(transactions) == -(-free // 16)


def test_an_older_file_reclaims_nothing_until_vacuumed_once(tmp_path):
    path = tmp_path / "old.db"
    older_file(path)
    with Gateway.open(str(path), max_rows=KEEP) as gw:
        assert gw.store.pragma("auto_vacuum") == 0
        fill(gw)
        assert gw.prune()["pages_reclaimed"] == 0
    pruned = file_bytes(path)
    run = subprocess.run(
        [sys.executable, "-m", "sessionstate.clients.cli", "vacuum", "--db", str(path)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"vacuumed {path}: ") and "auto-vacuum is now incremental" in run.stdout
    assert file_bytes(path) < pruned / 4, (pruned, file_bytes(path))
    # auto_prune off: the prune at open (R30) would reclaim the pages before this one does.
    with Gateway.open(str(path), max_rows=KEEP // 2, auto_prune=False) as gw:
        assert gw.store.pragma("auto_vacuum") == AUTO_VACUUM_INCREMENTAL
        assert gw.session_status(MAIN)["stateVersion"] == EVENTS + 1
        assert gw.prune()["pages_reclaimed"] > 0


def vacuum_command(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sessionstate.clients.cli", "vacuum", "--db", url], capture_output=True, text=True, timeout=120
    )


def test_the_vacuum_command_runs_on_every_backend_and_keeps_every_row(db_url):
    with Gateway.open(db_url) as gw:
        fill(gw, 2_000)
        gw.store.prune_events(cutoff=0, max_rows=100)
        before = gw.store.dump()
    run = vacuum_command(db_url)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("vacuumed ") and " MB -> " in run.stdout
    with Gateway.open(db_url) as gw:
        assert gw.store.dump() == before
        assert gw.ops.state_version(MAIN) == 2_000 + 1


def test_the_vacuum_command_creates_no_database(backend: Backend):
    with backend.database() as url:  # an empty database: no sessionstate tables
        run = vacuum_command(url)
        assert run.returncode == 2 and run.stderr.startswith("sessionstate: storage_unavailable: ")
        try:
            open_store(url, notifying_kinds=NOTIFYING_KINDS, create=False).close()
        except StorageUnavailable:
            pass  # still nothing there
        else:
            raise AssertionError("the vacuum command created the database")


def test_vacuum_on_a_missing_file_creates_nothing(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "sessionstate.clients.cli", "vacuum", "--db", str(tmp_path / "no" / "state.db")],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 2 and run.stderr.startswith("sessionstate: storage_unavailable: ")
    assert list(tmp_path.iterdir()) == []
