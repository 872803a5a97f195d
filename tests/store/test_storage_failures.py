"""Storage that fails while in use: a full disk, a read-only file or directory.

Simulations, each the failure SQLite itself reports:
- a full disk: a real one (a 2 MB tmpfs filled with a ballast file: SQLITE_FULL from ENOSPC,
  for the WAL as for the file), which needs mount rights (root here; skipped elsewhere), and
  ``PRAGMA max_page_count`` (the file may not grow: SQLITE_FULL), which runs anywhere;
- read-only: root ignores permission bits, so a ``mode=ro`` URL, ``PRAGMA query_only`` and
  ``chattr +i`` (immutable, which binds root too; skipped where chattr is refused) stand in
  for a read-only file or directory. All three give the SQLite errors a non-root user gets
  from ``chmod``: SQLITE_READONLY on writing, SQLITE_CANTOPEN when the -wal/-shm files cannot
  be created.

Contract: every failing call raises a ``StorageError`` subclass naming the path and the cause
(``record_event`` alone returns ``None`` and counts it, R15), ``call_tool`` returns the error's
code, and the database is unchanged.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from sessionstate import Gateway, StorageBusy, StorageError, StorageFull, StorageUnavailable
from sessionstate.shared.policy import ToolPolicy
from tests.tools.support import full_dump, open_gateway
from trials.full_disk import fill, mount_tmpfs, unmount

MAIN = "agent:main:main"
PEER = "agent:main:peer"
THIRD = "agent:main:third"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    if not mount_tmpfs(mount, "2m"):
        pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
    try:
        yield mount
    finally:
        unmount(mount)


@pytest.fixture
def immutable() -> Iterator[Callable[[Path], None]]:
    marked: list[Path] = []

    def mark(path: Path) -> None:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is refused here (file system or capability)")
        marked.append(path)

    yield mark
    for path in marked:
        subprocess.run(["chattr", "-i", str(path)], check=True)


# Each session logs its own `created` first (R27): MAIN 1, PEER 2, THIRD 3; MAIN's watch of
# PEER starts at PEER's head, 2; PEER's goal is 4.
WATCH_SEED = 2
GOAL = 4


def populated(url: str) -> tuple[Gateway, Any]:
    gw, runner = open_gateway(url, policy=ToolPolicy(visibility="agent"))
    for key in (MAIN, PEER, THIRD):
        gw.create_session(key)
    gw.watch(MAIN, PEER)
    assert gw.ops.cursor_positions(MAIN, PEER).last_seen == WATCH_SEED
    assert gw.record_event(PEER, "goal_changed", actor_type="human", summary="before") == GOAL
    return gw, runner


def assert_refused(call: Callable[[], Any], error: type[StorageError], path: Path, words: str) -> None:
    with pytest.raises(error) as raised:
        call()
    assert str(path) in raised.value.message and words in raised.value.message, raised.value.message


WRITES: dict[str, Callable[[Gateway], Any]] = {
    "create_session": lambda gw: gw.create_session("agent:main:new"),
    "watch": lambda gw: gw.watch(MAIN, THIRD),
    "unwatch": lambda gw: gw.unwatch(MAIN, PEER),
    "reset_session": lambda gw: gw.ops.reset_session(MAIN),
    "delete_session": lambda gw: gw.ops.delete_session(THIRD),
    "drain_system_events": lambda gw: gw.drain_system_events(MAIN),
    "append_message": lambda gw: gw.transcripts.append_message(PEER, "user", "hello"),
}


def test_a_full_disk_says_storage_full_and_changes_nothing(small_disk):
    path = small_disk / "state.db"
    gw, _ = populated(str(path))
    try:
        # The WAL emptied to nothing first, so the next commit needs new space. Otherwise a
        # checkpoint that finished before the ballast lets SQLite write the next commit over
        # the WAL's old frames, into space the file already holds, and it succeeds.
        assert gw.store.checkpoint("TRUNCATE") == (0, 0, 0)
        ballast = fill(small_disk)
        before = full_dump(gw)
        failures = gw.ops.stats["append_failures"]
        # R15: recording stays best effort.
        assert gw.record_event(PEER, "goal_changed", actor_type="human", summary="lost") is None
        assert gw.ops.stats["append_failures"] == failures + 1
        for name, write in WRITES.items():
            assert_refused(lambda: write(gw), StorageFull, path, "storage full")
        result = gw.call_tool(MAIN, "sessions_send", {"sessionKey": PEER, "message": "hi", "timeoutSeconds": 0})
        assert result["status"] == "error" and result["error"]["code"] == "storage_full", result
        assert str(path) in result["error"]["message"]
        assert full_dump(gw) == before
        assert gw.session_status(PEER)["stateVersion"] == GOAL  # reading still works
        ballast.unlink()  # space again: the same gateway writes again
        assert gw.record_event(PEER, "goal_changed", actor_type="human", summary="after") == GOAL + 1
        gw.create_session("agent:main:new")
    finally:
        gw.close()


def test_a_database_that_may_not_grow_says_storage_full(tmp_path):
    path = tmp_path / "state.db"
    gw, _ = populated(str(path))
    try:
        pages = gw.store.pragma("page_count")
        gw.store.pragma("max_page_count", pages)
        # Rows fill the last free bytes of their pages first: write until a page is needed.
        for attempt in range(10_000):
            before = full_dump(gw)
            try:
                gw.create_session(f"agent:main:filler{attempt:05d}", label="x" * 200)
            except StorageFull as exc:
                assert str(path) in exc.message and "storage full" in exc.message
                break
        else:
            pytest.fail("the database never filled up")
        assert full_dump(gw) == before
        failures = gw.ops.stats["append_failures"]
        recorded = [gw.record_event(PEER, "goal_changed", actor_type="human", summary="y" * 200) for _ in range(200)]
        assert recorded[-1] is None and gw.ops.stats["append_failures"] == failures + recorded.count(None)
    finally:
        gw.close()


@pytest.mark.parametrize("how", ["mode=ro", "query_only"])
def test_a_read_only_database_reads_and_refuses_writes(tmp_path, how):
    path = tmp_path / "state.db"
    gw, _ = populated(str(path))
    if how == "mode=ro":
        gw.close()
        gw, _ = open_gateway(f"sqlite:///file:{path}?mode=ro&uri=true", policy=ToolPolicy(visibility="agent"))
    else:
        gw.store.pragma("query_only", 1)
    try:
        before = full_dump(gw)
        assert gw.session_status(PEER)["stateVersion"] == GOAL
        assert gw.record_event(PEER, "goal_changed", actor_type="human", summary="lost") is None
        for name, write in WRITES.items():
            assert_refused(lambda: write(gw), StorageUnavailable, path, "readonly")
        result = gw.call_tool(MAIN, "sessions_send", {"sessionKey": PEER, "message": "hi", "timeoutSeconds": 0})
        assert result["status"] == "error" and result["error"]["code"] == "storage_unavailable", result
        assert full_dump(gw) == before
    finally:
        gw.close()


def test_an_immutable_file_opens_read_only(tmp_path, immutable):
    path = tmp_path / "state.db"
    gw, _ = populated(str(path))
    gw.close()
    immutable(path)
    gw = Gateway.open(str(path))
    try:
        assert gw.session_status(PEER)["stateVersion"] == GOAL
        assert_refused(lambda: gw.create_session("agent:main:new"), StorageUnavailable, path, "readonly")
    finally:
        gw.close()


@pytest.mark.parametrize("existing", [False, True])
def test_an_unwritable_directory_is_named_as_the_cause(tmp_path, immutable, existing):
    directory = tmp_path / "locked"
    directory.mkdir()
    path = directory / "state.db"
    if existing:
        Gateway.open(str(path)).close()
    immutable(directory)
    assert_refused(lambda: Gateway.open(str(path)), StorageUnavailable, path, "directory is not writable")


def test_a_write_lock_held_past_the_busy_timeout_says_storage_busy(tmp_path):
    path = tmp_path / "state.db"
    Gateway.open(str(path)).close()
    gw = Gateway.open(f"sqlite:///{path}?timeout=0.05")  # the URL may shorten the 10 s default
    other = sqlite3.connect(path, isolation_level=None)
    try:
        gw.create_session(MAIN)
        before = gw.store.dump()
        other.execute("BEGIN IMMEDIATE")
        assert_refused(lambda: gw.create_session(PEER), StorageBusy, path, "database is locked")
        assert gw.record_event(MAIN, "goal_changed", actor_type="human", summary="x") is None
        other.execute("ROLLBACK")
        assert gw.store.dump() == before
        gw.create_session(PEER)
    finally:
        other.close()
        gw.close()


def _owing_with_more_behind(path: Path) -> None:
    """A file whose MAIN owes a notice on PEER with more events behind it (pending with more):
    the startup sweep's transition writes there, which a read-only open cannot."""
    gw, _ = populated(str(path))
    try:
        for summary in ("more", "and more"):
            assert gw.record_event(PEER, "goal_changed", actor_type="human", summary=summary) is not None
        positions = gw.ops.cursor_positions(MAIN, PEER)
        assert positions is not None and positions.material > positions.notified > positions.last_seen
    finally:
        gw.close()


@pytest.mark.parametrize("how", ["mode=ro", "immutable", "query_only"])
def test_a_read_only_database_owing_notices_opens_with_them_in_memory(tmp_path, immutable, how, capsys):
    """Issue 20: the startup sweep wrote, so the open failed with StorageUnavailable."""
    from sessionstate.clients.cli import main as cli
    from sessionstate import notice_text

    path = tmp_path / "state.db"
    _owing_with_more_behind(path)
    if how == "query_only":  # the sweep of a gateway whose connection was made query-only
        gw = Gateway.open(str(path))  # its sweep wrote; another process records more
        with Gateway.open(str(path)) as other:
            assert other.record_event(PEER, "goal_changed", actor_type="human", summary="later") is not None
        gw.ops.forget_queued(MAIN)
        gw.store.pragma("query_only", 1)
        before = full_dump(gw)
        assert gw.ops.startup_sweep() == 1
    else:
        if how == "immutable":
            immutable(path)
        url = f"sqlite:///file:{path}?mode=ro&uri=true" if how == "mode=ro" else str(path)
        wakes: list[str] = []
        gw = Gateway.open(url, on_wake=lambda watcher, reason: wakes.append(watcher))
        assert wakes == [MAIN]  # woken without the durable slot (R23) it cannot write
        before = full_dump(gw)
    try:
        assert gw.pending_system_events(MAIN) == [notice_text(PEER, WATCH_SEED)]
        status = gw.session_status(PEER, changes_since=0)
        # PEER's `created`, the goal, "more", "and more" (and the other process's "later").
        goals = 4 if how == "query_only" else 3
        version = GOAL + goals - 1
        assert [e["kind"] for e in status["stateChanges"]["events"]] == ["created"] + ["goal_changed"] * goals
        assert status["stateVersion"] == version == status["stateChanges"]["events"][-1]["sequence"]
        assert full_dump(gw) == before  # held in memory only
    finally:
        gw.close()
    if how != "query_only":
        assert cli(["status", PEER, "--db", url, "--changes-since", "1"]) == 0
        assert "stateVersion 6" in capsys.readouterr().out
