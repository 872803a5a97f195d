"""The PostgreSQL store's opening and connection beyond the earlier tests: what a refused
opening says in full, an empty stamp table, a delete trigger missing from an older database, a
statement the server refuses, and a lost connection that cannot be replaced yet. Written for the
survivors of a mutmut run (docs/mutants/store-postgres-3.md)."""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy.engine import make_url
from sqlmodel import SQLModel

from sessionstate import Gateway, SchemaMismatch
from sessionstate.errors import InvalidDatabaseUrl, StorageError, StorageUnavailable, UnsupportedBackend
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import ChangeSet, SessionRecord, commit_outcome, migrations, open_store, postgres, schema
from sessionstate.store.commit_outcome import ABORTED, COMMITTED, UNKNOWN
from sessionstate.store.factory import is_postgres_url, url_scheme
from sessionstate.store.postgres_connection import CONNECT_TIMEOUT_SECONDS
from sessionstate.store.postgres_schema import SESSION_CHILD_TABLES, VERSION_TABLE
from tests.backends import admin_connection
from tests.store.sessions import A
from tests.store.test_commit_outcome import proxied  # noqa: F401  (a fixture)
from trials.pgproxy import AFTER_COMMIT, BEFORE_COMMIT
from tests.store.test_postgres_schema import altered_database, make_database, raw, set_stamp, snapshot, stamp

# -- opening: the schema ----------------------------------------------------------------------


def test_a_refusal_names_every_table_of_another_shape_with_all_its_differences(pg_url):
    before = altered_database(pg_url, "ALTER TABLE session_meta DROP COLUMN last_to, DROP COLUMN channel",
                              "ALTER TABLE upstream_links ADD COLUMN surprise text, ADD COLUMN extra integer")
    differences = {
        "session_meta": "missing columns: channel, last_to; unexpected columns: none",
        "upstream_links": "missing columns: none; unexpected columns: extra, surprise",
    }
    # The tables are named in the order the declarations sort them (dependencies first).
    named = "; ".join(f"{t.name} ({differences[t.name]})" for t in SQLModel.metadata.sorted_tables
                      if t.name in differences)
    with pytest.raises(SchemaMismatch) as refused:
        Gateway.open(pg_url)
    where = make_url(pg_url).render_as_string(hide_password=True)
    assert str(refused.value) == (
        f"{where}: not a sessionstate database of a known shape; these tables have other columns: {named}."
        " Nothing was changed."
    )
    assert snapshot(pg_url) == before


def test_an_empty_stamp_table_is_no_stamp_and_a_new_database_is_created_and_stamped(pg_url):
    with raw(pg_url) as conn:  # left by an opening that never stamped, or emptied by hand
        conn.exec_driver_sql(f"CREATE TABLE {VERSION_TABLE} (one boolean PRIMARY KEY DEFAULT true"
                             " CHECK (one), version integer NOT NULL)")
    make_database(pg_url)
    assert stamp(pg_url) == schema.SCHEMA_VERSION


def test_opening_an_empty_database_without_create_says_so_and_creates_nothing(pg_url):
    with pytest.raises(StorageUnavailable) as refused:
        open_store(pg_url, notifying_kinds=NOTIFYING_KINDS, create=False)
    where = make_url(pg_url).render_as_string(hide_password=True)
    assert str(refused.value) == f"{where}: no sessionstate tables there (nothing was created)"
    with raw(pg_url) as conn:
        assert conn.exec_driver_sql(
            "SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
        ).scalar() == 0


def test_each_migration_is_logged_naming_the_database_and_the_step(pg_url, caplog):
    make_database(pg_url)
    set_stamp(pg_url, schema.SCHEMA_VERSION - 1)
    with caplog.at_level(logging.WARNING, logger="sessionstate"):
        Gateway.open(pg_url).close()
    last = migrations.MIGRATIONS[-1]
    where = make_url(pg_url).render_as_string(hide_password=True)
    assert [r.getMessage() for r in caplog.records if " migrating " in r.getMessage()] == [
        f"{where}: migrating schema version {last.version - 1} -> {last.version}: {last.summary}"
    ]


def session_delete_triggers(url: str) -> set[str]:
    with raw(url) as conn:
        return {row[0] for row in conn.exec_driver_sql(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'sessions'::regclass AND NOT tgisinternal"
        )}


@pytest.mark.parametrize("missing", [table for table, _, _ in SESSION_CHILD_TABLES[1:]])
def test_opening_recreates_a_delete_trigger_missing_after_one_that_is_present(pg_url, missing):
    make_database(pg_url)
    trigger = f"trg_{missing}_session_deleted"
    with raw(pg_url) as conn:
        conn.exec_driver_sql(f"DROP TRIGGER {trigger} ON sessions")
    Gateway.open(pg_url).close()
    assert session_delete_triggers(pg_url) == {f"trg_{table}_session_deleted" for table, _, _ in SESSION_CHILD_TABLES}


# -- opening: the URL ------------------------------------------------------------------------


@pytest.mark.parametrize("url, error, message", [
    ("", InvalidDatabaseUrl, "the database URL is empty; give a sqlite:/// URL or a file path"),
    ("  ", InvalidDatabaseUrl, "the database URL is empty; give a sqlite:/// URL or a file path"),
    (None, InvalidDatabaseUrl, "the database URL is empty; give a sqlite:/// URL or a file path"),
    ("state.db", InvalidDatabaseUrl,
     "'state.db' is not a database URL (no scheme); give a sqlite:/// URL or a file path"),
    ("MySQL+driver://h/db", UnsupportedBackend,
     "backend 'mysql' is not supported; supported schemes: ['postgres', 'postgresql', 'sqlite'] (e.g. a sqlite:/// URL)"),
], ids=["empty", "blank", "none", "no-scheme", "unknown-backend"])
def test_open_store_refuses_what_no_backend_opens_saying_what_to_give(url, error, message):
    with pytest.raises(error) as refused:
        open_store(url, notifying_kinds=NOTIFYING_KINDS)
    assert str(refused.value) == message


@pytest.mark.parametrize("url, scheme", [
    ("postgresql://u:pw@h:5432/db", "postgresql"), ("Postgres+psycopg://u:p@h:1/d?x=a:b", "postgres"),
    ("postgresql+psycopg+extra://h/db", "postgresql"),  # the whole driver suffix goes, pluses and all
])
def test_a_urls_scheme_is_what_comes_before_its_first_colon_and_plus(url, scheme):
    """A password, a port or a query value holds colons too."""
    assert url_scheme(url) == scheme and is_postgres_url(url)


@pytest.mark.parametrize("unusable", ["\x00", "\ud800", "\udabc", "\udfff"], ids=["nul", "first-surrogate", "a-surrogate", "last-surrogate"])
def test_a_postgres_url_holding_a_nul_or_a_lone_surrogate_is_refused_before_any_connection(unusable):
    url = f"postgresql://sessionstate@/db{unusable}?host=/nonexistent"
    with pytest.raises(InvalidDatabaseUrl) as refused:
        open_store(url, notifying_kinds=NOTIFYING_KINDS)
    assert str(refused.value) == f"{url!r}: a database URL holds no NUL and no lone surrogate"


def test_a_postgres_url_that_does_not_parse_is_refused_saying_why():
    url = "postgresql://sessionstate@localhost:notaport/db"
    with pytest.raises(InvalidDatabaseUrl) as refused:
        open_store(url, notifying_kinds=NOTIFYING_KINDS)
    assert str(refused.value).startswith(f"{url!r} is not a database URL ("), str(refused.value)


def test_a_postgres_url_naming_another_driver_is_refused_naming_the_one_to_use():
    with pytest.raises(UnsupportedBackend) as refused:
        open_store("postgresql+asyncpg://sessionstate@/db", notifying_kinds=NOTIFYING_KINDS)
    assert str(refused.value) == (
        "'postgresql+asyncpg' is not a PostgreSQL URL this store opens; use postgresql+psycopg://"
    )


def test_a_postgres_url_without_psycopg_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sessionstate.store.postgres", None)  # as if psycopg were missing
    with pytest.raises(UnsupportedBackend, match=r"^PostgreSQL URLs need psycopg 3: pip install 'sessionstate\[postgres\]'"):
        open_store("postgresql://sessionstate@/db", notifying_kinds=NOTIFYING_KINDS)


def test_the_short_postgres_scheme_opens_with_psycopg(pg_url):
    short = make_url(pg_url).set(drivername="postgres").render_as_string(hide_password=False)
    store = open_store(short, notifying_kinds=NOTIFYING_KINDS)
    try:
        assert store.setting("server_version_num").isdigit()
    finally:
        store.close()


# -- the connection ---------------------------------------------------------------------------


@pytest.fixture
def store(pg_url: str) -> Iterator[Any]:
    opened = open_store(pg_url, notifying_kinds=NOTIFYING_KINDS)
    yield opened
    opened.close()


def test_a_statement_the_server_refuses_is_a_storage_error_saying_why(store):
    with pytest.raises(StorageError, match='unrecognized configuration parameter "sessionstate.no_such_setting"'):
        store.setting("sessionstate.no_such_setting")
    assert store.setting("standard_conforming_strings") == "on"  # the connection still serves


def end_backend(pid: int) -> None:
    """What a server restart does to one connection: its backend ends (waited for)."""
    with admin_connection() as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone()[0]


def test_a_lost_connection_that_cannot_be_replaced_yet_is_unavailable_then_replaced(proxied):  # noqa: F811
    url, _direct, proxy = proxied
    store = open_store(url, notifying_kinds=NOTIFYING_KINDS)
    try:
        with store.transaction():
            store.insert_session(SessionRecord(A, "a", "main", None, None, None, 1.0, 1.0))
        proxy.refuse(60)
        end_backend(store.backend_pid())
        with pytest.raises(StorageUnavailable) as lost:  # the statement that finds it gone
            store.head(A, "a")
        assert lost.value.retry_safe
        with pytest.raises(StorageUnavailable) as refused:  # the new connection turned away
            store.head(A, "a")
        assert refused.value.retry_safe
        assert str(refused.value).startswith("PostgreSQL unavailable: "), str(refused.value)
        proxy.refuse(0)
        head = store.head(A, "a")  # once the server answers, the next call reconnects
        assert head is not None and head.last_sequence == 0
    finally:
        store.close()


# -- opening: the connection's parameters and the first transaction ---------------------------


@contextmanager
def silent_server() -> Iterator[str]:
    """A socket directory whose server accepts connections and never answers (a server hung
    in its startup, or a dead host's half-open path): libpq waits there until its timeout."""
    directory = tempfile.mkdtemp(prefix="sessionstate-silent.")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.path.join(directory, ".s.PGSQL.5432"))
    listener.listen(8)
    try:
        yield f"postgresql+psycopg://postgres@/sessionstate_test?host={directory}"
    finally:
        listener.close()  # a connection still waiting then fails at once
        shutil.rmtree(directory, ignore_errors=True)


def seconds_to_refuse(url: str) -> float:
    """How long opening ``url`` takes to fail (``StorageUnavailable``); at most 20 s waited."""
    failures: list[BaseException] = []

    def try_open() -> None:
        try:
            open_store(url, notifying_kinds=NOTIFYING_KINDS).close()
        except BaseException as exc:  # reported below
            failures.append(exc)

    started = time.monotonic()
    opening = threading.Thread(target=try_open, daemon=True)
    opening.start()
    opening.join(20)
    assert not opening.is_alive(), "the opening waits for the silent server without a timeout"
    assert len(failures) == 1 and isinstance(failures[0], StorageUnavailable), failures
    assert failures[0].retry_safe and "timeout" in str(failures[0]), str(failures[0])
    return time.monotonic() - started


def test_opening_on_a_server_that_never_answers_gives_up_after_the_connect_timeout(monkeypatch):
    monkeypatch.setattr(postgres, "CONNECT_TIMEOUT_SECONDS", 2)  # libpq's shortest
    with silent_server() as url:
        assert seconds_to_refuse(url) < 8


def test_a_urls_own_connect_timeout_is_the_one_used():
    assert CONNECT_TIMEOUT_SECONDS >= 8  # the store's default is longer than the URL's below
    with silent_server() as url:
        assert seconds_to_refuse(url + "&connect_timeout=2") < 6


def test_the_store_names_its_database_without_the_urls_password(pg_url):
    with_password = make_url(pg_url).set(password="pg-secret-1")
    store = open_store(with_password.render_as_string(hide_password=False), notifying_kinds=NOTIFYING_KINDS)
    store.close()
    with pytest.raises(StorageUnavailable) as closed:
        store.head(A, "a")
    assert "pg-secret-1" not in str(closed.value) and "pg-secret-1" not in store.where
    assert str(closed.value) == f"{with_password.render_as_string(hide_password=True)}: the store is closed"


def test_a_new_stores_first_transaction_whose_commit_answer_is_lost_is_resolved(proxied, monkeypatch):  # noqa: F811
    url, _direct, proxy = proxied
    monkeypatch.setattr(commit_outcome, "RESOLVE_SECONDS", 2.0)  # a wrong id is not waited on long
    store = open_store(url, notifying_kinds=NOTIFYING_KINDS)
    try:
        proxy.arm(AFTER_COMMIT)
        with store.transaction():  # the store's first: no earlier one left it an id
            store.insert_session(SessionRecord(A, "a", "main", None, None, None, 1.0, 1.0))
        assert proxy.dropped == 1
        assert store.commit_resolutions == {COMMITTED: 1, ABORTED: 0, UNKNOWN: 0}
        assert store.head(A, "a") is not None
    finally:
        store.close()


# -- commits that sent nothing, wrote nothing, or lost their answer ---------------------------


def test_a_transaction_that_sent_nothing_commits_its_notification_and_leaves_no_transaction_open(store):
    feed = store.open_change_feed(tuple(NOTIFYING_KINDS))
    try:
        with store.transaction():  # no statement: the notification is all it sends
            store.note_changed_watchers(["agent:a:w1"])
        feed.sync()
        assert feed.take() == ChangeSet([], ["agent:a:w1"], [], False)
    finally:
        feed.close()
    store.head(A, "a")  # a statement outside any transaction
    with admin_connection() as admin:
        state = admin.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (store.backend_pid(),)).fetchone()
    assert state == ("idle",)


def test_a_commit_whose_connection_is_gone_before_it_is_sent_is_retryably_unavailable(store):
    with pytest.raises(StorageUnavailable) as lost, store.transaction():
        store.put_cursors("agent:a:t", "a", [("agent:a:w1", (0, 1, 1))], 1.0)  # a write, not an append
        end_backend(store.backend_pid())
    assert lost.value.retry_safe and "None" not in str(lost.value), str(lost.value)
    assert store.cursors_naming("agent:a:t", "a") == []  # the server rolled it back


def test_lost_commit_answers_of_transactions_that_wrote_nothing_count_as_committed(proxied):  # noqa: F811
    url, _direct, proxy = proxied
    store = open_store(url, notifying_kinds=NOTIFYING_KINDS)
    try:
        for _ in range(2):
            proxy.arm(AFTER_COMMIT)
            with store.transaction():  # a read only: no transaction id, nothing to resolve
                assert store.head(A, "a") is None
        assert proxy.dropped == 2
        assert store.commit_resolutions == {COMMITTED: 2, ABORTED: 0, UNKNOWN: 0}
    finally:
        store.close()


def test_a_commit_lost_before_the_server_had_it_says_its_transaction_rolled_back(proxied):  # noqa: F811
    url, _direct, proxy = proxied
    store = open_store(url, notifying_kinds=NOTIFYING_KINDS)
    try:
        proxy.arm(BEFORE_COMMIT)
        with pytest.raises(StorageUnavailable) as lost, store.transaction():
            store.insert_session(SessionRecord(A, "a", "main", None, None, None, 1.0, 1.0))
        assert lost.value.retry_safe
        assert re.fullmatch(r"PostgreSQL connection lost during commit; transaction \d+ rolled back",
                            str(lost.value)), str(lost.value)
        assert store.head(A, "a") is None and store.commit_resolutions[ABORTED] == 1
    finally:
        store.close()
