"""An append and its commit on PostgreSQL: a commit whose changes need more than one
notification sends them all, a notification-only commit on a lost connection is unavailable
(not an unknown outcome), an unknown session is named with its agent, and an append with a
dedupe key: its head lock, its transaction id (R29) and its notification (R22)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sessionstate.errors import CommitOutcomeUnknown, StorageUnavailable, UnknownSession
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SessionRecord
from sessionstate.store.commit_outcome import TXID_SQL
from sessionstate.store.postgres_feed import MAX_PAYLOAD_BYTES
from tests.backends import admin_connection
from tests.store.helpers import opened_store
from tests.store.sessions import A


@pytest.fixture
def store(pg_url: str) -> Iterator[Any]:
    with opened_store(pg_url, A) as opened:
        yield opened


@pytest.fixture
def feed(store: Any) -> Iterator[Any]:
    opened = store.open_change_feed(tuple(NOTIFYING_KINDS))
    yield opened
    opened.close()


def row(key: str, dedupe: str | None, actor_type: str = "agent", actor_id: str | None = "agent:b:actor") -> tuple[Any, ...]:
    """An event row (``records.EventRow``) of a notifying kind."""
    return (key, "a", "human_direct_message", actor_type, actor_id, "run-1", "s", None, 1.0, 1.0, dedupe)


def many_watchers() -> list[str]:
    """Watcher names whose one change set is well over one notification's payload."""
    names = [f"agent:w{i:04}:" + "x" * 180 for i in range(3 * MAX_PAYLOAD_BYTES // 190)]
    assert sum(len(n) for n in names) > 2 * MAX_PAYLOAD_BYTES
    return names


# -- R22: a transaction's changes in several notifications ----------------------------------------


@pytest.mark.parametrize("with_a_write", [False, True], ids=["notification-only", "with-an-event"])
def test_a_commit_whose_changes_need_several_notifications_sends_them_all(store, feed, with_a_write):
    names = many_watchers()
    with store.transaction():
        if with_a_write:
            store.append_event(*row(A, None))
        store.note_changed_watchers(names)
    feed.sync()
    told = feed.take()
    assert not told.resync
    assert sorted(told.watchers) == sorted(names)
    assert told.material == ([(A, "a", "agent:b:actor")] if with_a_write else [])


# -- a notification-only commit on a connection the server ended ----------------------------------


def test_a_notification_only_commit_on_a_lost_connection_is_unavailable_not_an_unknown_outcome(store):
    with admin_connection() as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (store.backend_pid(),))
    with pytest.raises(StorageUnavailable) as error:
        with store.transaction():
            store.note_changed_watchers(["agent:w:main"])  # nothing written: NOTIFY alone at commit
    # Nothing was being committed, so the outcome is known: nothing happened, and a retry is safe.
    assert not isinstance(error.value, CommitOutcomeUnknown)
    assert error.value.retry_safe


# -- the unknown session, named ------------------------------------------------------------------


@pytest.mark.parametrize("dedupe", [None, "k"], ids=["first-append", "with-a-dedupe-key"])
def test_an_append_to_an_unknown_session_names_it_and_its_agent(store, dedupe):
    with pytest.raises(UnknownSession, match=r"unknown session 'agent:z:nobody' \(agent 'z'\)"):
        with store.transaction():
            store.append_event("agent:z:nobody", "z", *row(A, dedupe)[2:])
    assert store.event_count() == 0


def test_an_append_whose_held_head_was_deleted_in_the_transaction_names_the_session(store):
    with store.transaction():
        store.insert_session(SessionRecord("agent:c:gone", "c", "main", None, None, None, 1.0, 1.0))
    with pytest.raises(UnknownSession, match=r"unknown session 'agent:c:gone' \(agent 'c'\)"):
        with store.transaction():
            store.lock_targets([("agent:c:gone", "c")])  # held, so the append takes no lock of its own
            store.delete_session_data("agent:c:gone", "c")
            store.append_event("agent:c:gone", "c", *row(A, None)[2:])  # no head row to bump
    assert store.event_count() == 0


# -- an append with a dedupe key: its head lock, its transaction id, its notification -------------


@pytest.mark.parametrize("first_dedupe", [None, "k1"], ids=["lock-and-append", "lock-then-dedupe"])
def test_the_first_append_of_a_transaction_holds_its_head_for_the_next(store, first_dedupe):
    with store.transaction():
        store.append_event(*row(A, first_dedupe))
        with store.trace_statements() as sent:
            store.caught_up_watchers(A, "a")  # a decision on the same target: the head is already held
            store.append_event(*row(A, "k2"))
    assert not [s for s in sent if "FOR UPDATE" in s], sent


def test_a_commit_after_a_deduplicated_append_asks_no_transaction_id(store):
    with store.trace_statements() as sent:
        with store.transaction():
            store.append_event(*row(A, "k"))  # the append returns the id (R29) ...
    assert store.head(A, "a").last_sequence == 1
    assert sent[0] == "BEGIN" and TXID_SQL not in sent, sent  # ... so the commit need not ask


def test_an_append_with_a_dedupe_key_is_told_with_its_session_and_actor(store, feed):
    with store.transaction():
        store.append_event(*row(A, "k"))
    feed.sync()
    assert feed.take().material == [(A, "a", "agent:b:actor")]
