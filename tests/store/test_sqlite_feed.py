"""The SQLite change feed (store/sqlite_feed.py) on its own, below the pump: what ``wait``
answers before, at and after another connection's commit, from another thread, when idle and
when stopped; what ``take`` hands over of the notifying events; and its refusals. SQLite only:
the feed watches a file (PostgreSQL's feed: test_postgres_feed.py)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sessionstate import InvalidArgument, StorageUnavailable
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import open_store
from sessionstate.store.sqlite import SqliteStore
from sessionstate.store.sqlite_feed import SqliteChangeFeed
from tests.store.helpers import sqlite_file_holding, sqlite_file_store
from tests.store.sessions import A, B

KINDS = tuple(NOTIFYING_KINDS)


@pytest.fixture
def store(path: Path) -> Iterator[SqliteStore]:
    with sqlite_file_holding(path, A, B) as s:
        yield s


@pytest.fixture
def other(store: SqliteStore, path: Path) -> Iterator[SqliteStore]:
    """Another server's connection to the same file: its commits are what the feed sees."""
    s = sqlite_file_store(path)
    yield s
    s.close()


@pytest.fixture
def feed(store: SqliteStore) -> Iterator[SqliteChangeFeed]:
    opened_feed = store.open_change_feed(KINDS)
    assert isinstance(opened_feed, SqliteChangeFeed)
    yield opened_feed
    opened_feed.close()


def record(store: SqliteStore, key: str, actor: str) -> int:
    with store.transaction():
        sequence, _ = store.append_event(key, "a", "human_direct_message", "human", actor, None, "s", None, 1.0, 1.0, None)
    return sequence


def on_a_thread(call: Callable[[], Any], within: float = 5.0) -> Any:
    """``call()`` on a thread of its own (the pump's), which must end ``within`` seconds."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed back to the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within)
    assert not thread.is_alive(), f"still waiting after {within} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_an_idle_wait_returns_after_its_timeout(feed):
    """First in the file: a wait that ignored its timeout would hang the tests after it."""
    assert on_a_thread(lambda: feed.wait(0.05)) is False


def test_wait_says_yes_once_per_commit_of_another_connection(feed, other):
    """Nothing committed since the feed opened: no. Another connection commits: yes, once;
    the same commit is not reported again."""
    assert feed.wait(0) is False
    record(other, A, "human-1")
    assert feed.wait(0) is True
    assert feed.wait(0) is False


def test_wait_runs_on_the_pumps_thread_not_the_one_that_opened_the_feed(feed, other):
    record(other, A, "human-1")
    assert on_a_thread(lambda: feed.wait(0)) is True


def test_an_interrupted_feed_answers_no_at_once_even_after_a_commit(feed, other):
    """``interrupt`` ends this and every later wait without a long sleep, and a stopping pump
    is told of no change to sweep."""
    record(other, A, "human-1")
    feed.interrupt()
    assert on_a_thread(lambda: feed.wait(30.0), within=5.0) is False


def test_take_hands_over_each_notifying_event_once_with_its_session_and_actor(feed, other):
    record(other, A, "human-1")
    first = feed.take()
    assert first.material == [(A, "a", "human-1")]
    assert first.resync is False
    record(other, B, "human-2")
    record(other, A, "human-3")
    assert feed.take().material == [(B, "a", "human-2"), (A, "a", "human-3")]
    assert feed.take().material == []


def test_an_in_memory_database_has_no_change_feed_and_says_why():
    store = open_store("sqlite://", notifying_kinds=NOTIFYING_KINDS)
    try:
        with pytest.raises(InvalidArgument) as refused:
            store.open_change_feed(KINDS)
    finally:
        store.close()
    assert refused.value.message == "a change feed needs a database file (an in-memory database has one connection)"


def test_a_feed_that_cannot_open_its_connection_is_a_storage_error_with_the_drivers_words(store, tmp_path):
    """The feed's own connection failing to open is translated through the store, like every
    other driver failure: a ``StorageUnavailable`` naming the store's database and the cause."""
    nowhere = tmp_path / "no such directory" / "state.db"
    with pytest.raises(StorageUnavailable) as refused:
        SqliteChangeFeed(nowhere, store.serving, KINDS, busy_timeout=1.0)
    assert isinstance(refused.value.__cause__, sqlite3.OperationalError)
    assert refused.value.message.startswith(f"{store.where}: ")
    assert "unable to open database file" in refused.value.message

