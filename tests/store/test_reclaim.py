"""Space: pruning gives pages back (new files), in bounded steps; `sessionstate vacuum` converts
older files once, and compacts a database on every backend through the store interface. On an
SQLite file still open: reclaiming inside a transaction, in empty steps or with nothing free,
and what reclaiming and vacuuming leave on disk."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from sessionstate import Gateway, StorageUnavailable
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import open_store
from sessionstate.store.sqlite import AUTO_VACUUM_INCREMENTAL, SqliteStore
from tests.backends import Backend
from tests.store.helpers import sqlite_file_holding

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


KEY = "agent:a:one"


@pytest.fixture
def store(path: Path) -> Iterator[SqliteStore]:
    with sqlite_file_holding(path, KEY) as s:
        yield s


def fill_store(store: SqliteStore, count: int = 3_000) -> None:
    """``count`` events of KEY, each with a summary long enough that pruning frees pages."""
    with store.transaction():
        for n in range(count):
            store.append_event(KEY, "a", "compacted", "system", None, None, "s" * 200, None, float(n), float(n), None)


@pytest.fixture
def freed(store: SqliteStore) -> SqliteStore:
    """The store after pruning all but 10 events: free pages not yet handed back."""
    fill_store(store)
    assert store.prune_events(cutoff=0, max_rows=10)["events"] == 2_990
    assert store.pragma("freelist_count") > 50
    return store


def test_reclaiming_inside_a_transaction_reclaims_nothing(freed):
    """Reclaiming takes transactions of its own: inside the caller's it does nothing, and
    after it reclaims every free page."""
    free = freed.pragma("freelist_count")
    with freed.transaction():
        assert freed.reclaim_free_pages() == 0
        assert freed.pragma("freelist_count") == free
    assert freed.reclaim_free_pages() == free
    assert freed.pragma("freelist_count") == 0


def test_reclaiming_in_steps_of_no_pages_returns_zero_and_ends(freed, path):
    """A step that frees nothing ends the loop: ``step_pages=0`` reclaims 0 pages, returns
    (rather than stepping forever) and leaves the free pages as they were."""
    free = freed.pragma("freelist_count")
    answers: list[object] = []
    worker = threading.Thread(target=lambda: answers.append(freed.reclaim_free_pages(step_pages=0)), daemon=True)
    worker.start()
    worker.join(30)  # it takes milliseconds when it ends at all
    if worker.is_alive():  # stepping forever: another writer's lock makes its next step fail
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        worker.join(60)
        blocker.execute("ROLLBACK")
        blocker.close()
    assert answers == [0], "reclaim_free_pages(step_pages=0) did not return 0"
    assert freed.pragma("freelist_count") == free


def test_reclaimed_pages_leave_the_file_while_the_store_is_still_open(freed, path):
    """The checkpoint after reclaiming shrinks the database file at once (no other connection
    holds a snapshot), not only when the store closes."""
    freed.pragma("wal_checkpoint")  # the file holds every page, free ones included
    before = path.stat().st_size
    assert before == freed.pragma("page_count") * freed.pragma("page_size")
    assert freed.reclaim_free_pages() > 0
    assert path.stat().st_size == freed.pragma("page_count") * freed.pragma("page_size") < before


def test_reclaiming_with_nothing_free_does_not_touch_the_file(store, path):
    """No free page: no transaction and no checkpoint, so the events still in the WAL stay
    there and the database file's bytes do not change."""
    fill_store(store, 50)
    assert store.pragma("freelist_count") == 0
    wal = Path(f"{path}-wal")
    assert wal.stat().st_size > 0
    before = path.read_bytes(), wal.read_bytes()
    with store.trace_statements() as statements:
        assert store.reclaim_free_pages() == 0
    assert (path.read_bytes(), wal.read_bytes()) == before
    assert "BEGIN IMMEDIATE" not in statements, statements


def test_vacuum_reports_what_it_did_and_leaves_the_file_at_its_new_size(freed, path):
    """The report's detail counts the free pages there were, its "after" is the file's real
    size, and the file has that size while the store is open (the WAL checkpointed empty)."""
    free = freed.pragma("freelist_count")
    report = freed.vacuum()
    assert report.detail == (
        f"{free} free pages returned; auto-vacuum is now incremental, so prune() gives freed pages back from now on"
    )
    assert report.bytes_after == freed.pragma("page_count") * freed.pragma("page_size") < report.bytes_before
    assert path.stat().st_size == report.bytes_after
    assert Path(f"{path}-wal").stat().st_size == 0
    assert freed.pragma("freelist_count") == 0

