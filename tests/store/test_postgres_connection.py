"""Opening the PostgreSQL store and keeping its connection: what a URL must be (its scheme, its
driver, what cannot be in it), what an opening refuses before connecting, a server that never
answers (the connect timeout, the URL's own), a driver that fails after connecting, a statement
the server refuses, a lost connection that cannot be replaced yet, a feature table read on a lost
connection, and that the store names its database without the URL's password."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sessionstate.errors import InvalidDatabaseUrl, StorageError, StorageUnavailable, UnsupportedBackend
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SessionRecord, open_store, postgres
from sessionstate.store.factory import is_postgres_url, url_scheme
from sessionstate.store.postgres import PostgresStore
from sessionstate.store.postgres_connection import CONNECT_TIMEOUT_SECONDS
from tests.backends import admin_connection
from tests.store.helpers import end_backend
from tests.store.sessions import A

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


def test_a_statement_the_server_refuses_is_a_storage_error_saying_why(pg_store):
    with pytest.raises(StorageError, match='unrecognized configuration parameter "sessionstate.no_such_setting"'):
        pg_store.setting("sessionstate.no_such_setting")
    assert pg_store.setting("standard_conforming_strings") == "on"  # the connection still serves


def test_a_lost_connection_that_cannot_be_replaced_yet_is_unavailable_then_replaced(proxied):
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


# -- refused before connecting, or after --------------------------------------------------------


@pytest.mark.parametrize("level", ["FAST", "", 1, None])
def test_a_durability_level_postgresql_has_no_mapping_for_is_refused_before_connecting(level):
    # The host does not exist: the check comes first, so nothing is tried.
    with pytest.raises(UnsupportedBackend, match=r"synchronous must be one of \('OFF', 'NORMAL', 'FULL', 'EXTRA'\)"):
        PostgresStore("postgresql://nobody@/db?host=/nonexistent-sessionstate", notifying_kinds=(), synchronous=level)


def test_an_opening_whose_driver_fails_after_connecting_is_unavailable(pg_url, monkeypatch):
    def lost(self):
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(PostgresStore, "_connect", lost)
    with pytest.raises(StorageUnavailable, match="PostgreSQL unavailable: server closed the connection unexpectedly"):
        PostgresStore(pg_url, notifying_kinds=NOTIFYING_KINDS)


FEATURE_READS = {
    "meta": lambda store: store.meta.all(),
    "runs": lambda store: store.runs.get("run-1"),
    "transcripts": lambda store: store.transcripts.recent(A, "a", 5),
    "links": lambda store: store.links.all(),
    "serving": lambda store: store.serving.all_claims(),
}


@pytest.mark.parametrize("table", sorted(FEATURE_READS))
def test_a_feature_tables_read_on_a_lost_connection_is_unavailable_then_reconnects(pg_store, table):
    with admin_connection() as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pg_store.backend_pid(),))
    with pytest.raises(StorageUnavailable, match="PostgreSQL unavailable"):
        FEATURE_READS[table](pg_store)
    FEATURE_READS[table](pg_store)  # the next statement reconnects
