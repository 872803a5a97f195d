"""What the SQLite store's own code promises beyond the shared contract, on real files: the
exact words of its refusals (a closed store, a bad pragma name, an unknown session, a file it
cannot open or name, a URL it cannot use, an unknown synchronous level), how it reads its URLs
(in-memory spellings, read-only and read-write modes), and that a driver failure of any kind
comes out as a ``StorageError``."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Iterator

import pytest

from sessionstate import (
    InvalidArgument,
    InvalidDatabaseUrl,
    StorageError,
    StorageUnavailable,
    UnknownSession,
    UnsupportedBackend,
)
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SessionRecord, open_store
from sessionstate.store.sql_store import SYNCHRONOUS_LEVELS
from sessionstate.store.sqlite import SqliteStore
from tests.store.helpers import sqlite_file_holding, sqlite_file_store

KEY = "agent:a:one"


@pytest.fixture
def store(path: Path) -> Iterator[SqliteStore]:
    with sqlite_file_holding(path, KEY) as s:
        yield s


# -- refusals, in words ------------------------------------------------------------------------


def test_a_closed_store_says_it_is_closed_and_closing_again_is_harmless(store, path):
    """After ``close`` every call is refused with "the store is closed", not with the
    driver's words for a closed connection."""
    store.close()
    store.close()
    with pytest.raises(StorageUnavailable) as refused:
        store.head(KEY, "a")
    assert refused.value.message == f"{path}: the store is closed"


def test_a_pragma_name_that_is_no_identifier_is_refused_with_the_name(store):
    """``pragma`` runs only a name: anything else is a ValueError that shows what was given."""
    with pytest.raises(ValueError) as refused:
        store.pragma("user_version; DROP TABLE sessions")
    assert str(refused.value) == "not a pragma name: 'user_version; DROP TABLE sessions'"


def test_an_append_to_an_unknown_session_names_the_session_and_its_agent(store):
    """The head row is missing: UnknownSession says which key and which agent."""
    with pytest.raises(UnknownSession) as refused:
        with store.transaction():
            store.append_event("agent:b:ghost", "b", "compacted", "system", None, None, "s", None, 1.0, 1.0, None)
    assert refused.value.message == "unknown session 'agent:b:ghost' (agent 'b')"


def test_a_statement_the_driver_itself_refuses_is_a_storage_error(store, path):
    """A refusal raised by the ``sqlite3`` module, not by SQLite (it carries no SQLite error
    name), is translated like any other: a StorageError naming the database."""
    with pytest.raises(StorageError) as refused:
        store.run_sql("SELECT ?", ())
    assert refused.value.message.startswith(f"{path}: Incorrect number of bindings supplied")
    assert store.run_sql("SELECT ?", (7,)) == [(7,)]  # the store is still usable


def test_vacuum_inside_a_transaction_is_refused_by_name(store, path):
    """VACUUM cannot run in a transaction: the store says so before SQLite does."""
    with store.transaction():
        with pytest.raises(StorageUnavailable) as refused:
            store.vacuum()
    assert refused.value.message == f"{path}: vacuum cannot run inside a transaction"


def _unprivileged() -> list[str]:
    """The command prefix under which file permissions bind: none for an ordinary user; for
    root, the capabilities that override them dropped (setpriv), or the test is skipped."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root without setpriv: file permissions cannot be made to bind")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search"]


@pytest.mark.parametrize("what", ["file", "directory"])
def test_an_unopenable_file_is_explained_by_its_permissions(tmp_path, what):
    """SQLite says only "unable to open database file"; the store adds why, in full: a file it
    may not read, or a directory where it cannot create the -wal and -shm files."""
    directory = tmp_path / "d"
    directory.mkdir()
    path = directory / "state.db"
    sqlite_file_store(path).close()
    for leftover in directory.glob("state.db-*"):
        leftover.unlink()
    locked = path if what == "file" else directory
    mode = locked.stat().st_mode
    locked.chmod(0o000 if what == "file" else 0o555)
    try:
        run = subprocess.run(
            [*_unprivileged(), sys.executable, "-m", "sessionstate.clients.cli", "status", KEY, "--db", str(path)],
            capture_output=True, text=True, timeout=60,
        )
    finally:
        locked.chmod(mode)
    hint = {
        "file": "the file is not readable",
        "directory": "its directory is not writable: SQLite needs to create the -wal and -shm files beside it",
    }[what]
    assert run.returncode == 2, run.stderr
    line = run.stderr.strip()  # SQLite's own words differ by case (cannot open, read-only directory)
    assert line.startswith(f"sessionstate: storage_unavailable: {path}: ") and line.endswith(f") ({hint})"), line


def test_a_name_too_long_is_refused_in_the_file_systems_own_words(tmp_path):
    """A name the file system cannot hold: the message is the path and the OS's phrase for
    it, not Python's ``[Errno ...]`` rendering of the exception."""
    path = tmp_path / ("x" * 300)
    with pytest.raises(StorageUnavailable) as refused:
        sqlite_file_store(path)
    assert refused.value.message == f"{path}: {os.strerror(errno.ENAMETOOLONG)}"


def test_a_new_file_gets_every_missing_directory_on_its_path(tmp_path):
    """Creating a database makes all of its missing parent directories, however deep."""
    path = tmp_path / "a" / "b" / "c" / "state.db"
    store = sqlite_file_store(path)
    try:
        store.insert_session(SessionRecord(KEY, "a", "main", None, None, None, 1.0, 1.0))
    finally:
        store.close()
    assert path.is_file()


@pytest.mark.parametrize("url, error, message", [
    ("   ", InvalidDatabaseUrl, "the database URL is empty; give a sqlite:/// URL or a file path"),
    ("not a url", InvalidDatabaseUrl,
     "'not a url' is not a database URL (Could not parse SQLAlchemy URL from given URL string);"
     " give a sqlite:/// URL or a file path"),
    ("sqlite://user@/state.db", InvalidDatabaseUrl,
     "'sqlite://user@/state.db': a sqlite URL names no host; use sqlite:///relative or sqlite:////absolute"),
    ("postgresql://localhost/x", UnsupportedBackend,
     "'postgresql://localhost/x': backend 'postgresql' is not supported yet; use a sqlite:/// URL"),
    ("sqlite:///a\x00b.db", InvalidDatabaseUrl, "'sqlite:///a\\x00b.db' names no usable file (embedded null byte)"),
])
def test_a_url_the_sqlite_store_cannot_use_is_refused_in_words(url, error, message):
    """Each refusal of the SQLite store's own URL check says what was wrong and what to give
    instead (the store itself, not ``open_store``, which refuses some of these first)."""
    with pytest.raises(error) as refused:
        SqliteStore(url, notifying_kinds=NOTIFYING_KINDS)
    assert refused.value.message == message


def test_an_unknown_synchronous_level_is_refused_with_the_levels(path):
    """The refusal lists the levels that are accepted."""
    with pytest.raises(UnsupportedBackend) as refused:
        SqliteStore(f"sqlite:///{path}", notifying_kinds=NOTIFYING_KINDS, synchronous="SOMETIMES")
    assert refused.value.message == f"synchronous must be one of {SYNCHRONOUS_LEVELS}"
    assert not path.exists()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite:///file:shared?mode=memory&uri=true"])
def test_every_spelling_of_an_in_memory_database_is_one(url):
    """No file behind it: no path, no change feed (it needs a file), and its messages name
    the "in-memory database"."""
    store = open_store(url, notifying_kinds=NOTIFYING_KINDS)
    assert store.path is None
    with pytest.raises(InvalidArgument):
        store.open_change_feed(("compacted",))
    store.close()
    with pytest.raises(StorageUnavailable) as refused:
        store.head(KEY, "a")
    assert refused.value.message == "in-memory database: the store is closed"


@pytest.mark.parametrize("url, read_only", [
    ("sqlite:///{path}", False),
    ("sqlite:///{path}?uri=true", False),
    ("sqlite:///file:{path}?uri=true", False),
    ("sqlite:///file:{path}?mode=rw&uri=true", False),
    ("sqlite:///file:{path}?mode=ro&uri=true", True),
    ("sqlite:///{path}?mode=ro&uri=true", True),
    ("sqlite:///file:{path}?mode=ro&uri=1", True),
    ("sqlite:///file:{path}?immutable=1&uri=true", True),
])
def test_a_url_says_from_the_open_whether_the_store_may_write(path, url, read_only):
    """``read_only`` is known from the URL before anything is written (mode=ro, immutable=1,
    with uri=true or uri=1), and the file is the one named, with or without ``file:``."""
    sqlite_file_store(path).close()
    store = open_store(url.format(path=path), notifying_kinds=NOTIFYING_KINDS)
    try:
        assert store.read_only is read_only
        assert store.path == path
    finally:
        store.close()


def test_a_mode_without_uri_true_is_ignored_and_the_store_writes(path):
    """SQLAlchemy passes ``mode`` to SQLite only with uri=true (and warns): without it the
    store is an ordinary writable one."""
    sqlite_file_store(path).close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = open_store(f"sqlite:///{path}?mode=ro", notifying_kinds=NOTIFYING_KINDS)
    try:
        assert store.read_only is False
        store.insert_session(SessionRecord(KEY, "a", "main", None, None, None, 1.0, 1.0))
    finally:
        store.close()


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_a_read_only_or_read_write_url_to_a_missing_file_creates_nothing(tmp_path, mode):
    """mode=ro and mode=rw open only an existing file: no directory and no file is made."""
    path = tmp_path / "missing" / "state.db"
    with pytest.raises(StorageUnavailable) as refused:
        open_store(f"sqlite:///file:{path}?mode={mode}&uri=true", notifying_kinds=NOTIFYING_KINDS)
    assert refused.value.message == f"{path}: no database file there (nothing was created)"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("call", [
    lambda s: s.runs.get("run-1"),
    lambda s: s.transcripts.stats(KEY, "a"),
    lambda s: s.links.all(),
], ids=["runs", "transcripts", "links"])
def test_the_feature_tables_of_a_closed_store_say_it_is_closed(store, path, call):
    """Runs, transcripts and upstream links translate a failure through the store: closed,
    each says so like the store does."""
    store.close()
    with pytest.raises(StorageUnavailable) as refused:
        call(store)
    assert refused.value.message == f"{path}: the store is closed"
