"""The SQLite store's kept event rows (store/event_rows.py): a ``changesSince`` page whose rows
were all read before reads only its sequences, and equals, value for value and type for type,
the page the database holds now, across pruning, deletion and another connection's appends;
a transaction's own events are never kept; the rows kept are bounded, the first kept going
first."""

from __future__ import annotations

import sqlite3

import pytest

from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SessionRecord, SqliteStore
from sessionstate.store.event_rows import EventRowCache

A, B = "agent:a:one", "agent:a:two"


@pytest.fixture
def store(tmp_path):
    s = SqliteStore(f"sqlite:///{tmp_path / 'store.db'}", notifying_kinds=NOTIFYING_KINDS)
    for key in (A, B):
        s.insert_session(SessionRecord(key, "a", "main", None, None, None, 1.0, 1.0))
    yield s
    s.close()


def append(store, key=A, kind="human_direct_message", actor=None, payload=None, at=1.0):
    with store.transaction():
        return store.append_event(key, "a", kind, "human", actor, None, "s", payload, at, at, None)


def database_page(store, key, after, limit):
    """The page as a connection of its own reads it: what the database holds now."""
    with sqlite3.connect(store.path) as raw:
        return raw.execute(
            "SELECT sequence, kind, actor_type, occurred_at, summary, actor_id, run_id, payload"
            " FROM session_state_events WHERE session_key = ? AND agent_id = ? AND sequence > ?"
            " ORDER BY sequence LIMIT ?", (key, "a", after, limit)).fetchall()


def typed(rows):
    return [tuple((type(value), value) for value in row) for row in rows]


def page_statements(store, key, after, limit):
    with store.trace_statements() as statements:
        page = store.changes_page(key, "a", after, limit)
    return page, [s for s in statements if "FROM session_state_events WHERE session_key" in s]


def sequences_only(statements):
    return len(statements) == 1 and statements[0].startswith("SELECT sequence FROM")


def whole(statements):
    return len(statements) == 1 and statements[0].startswith("SELECT sequence, kind")


def test_a_page_read_before_is_its_sequences_only_and_equals_the_databases_page(store):
    append(store, at=1.5)
    append(store, kind="goal_changed", actor="agent:a:w", at=2.25)
    append(store, payload='{"status": "done"}', at=3)
    append(store, key=B)
    append(store, kind="compacted", at=1_700_000_000.123456)
    first, read = page_statements(store, A, 0, 10)
    assert whole(read)  # nothing kept yet: the page at once, no read of its sequences first
    again, read = page_statements(store, A, 0, 10)
    assert sequences_only(read)
    assert typed(again.events) == typed(first.events) == typed(database_page(store, A, 0, 10))
    assert again == first
    # a page inside the one read before: from the kept rows too
    inner, read = page_statements(store, A, 1, 2)
    assert sequences_only(read) and typed(inner.events) == typed(database_page(store, A, 1, 2))


def test_after_a_new_event_and_short_of_the_newest_a_page_is_read_whole_at_once(store):
    for _ in range(4):
        append(store)
    store.changes_page(A, "a", 0, 10)
    newest, _ = append(store, kind="compacted")
    page, read = page_statements(store, A, 2, 10)
    assert whole(read) and page.events[-1][:2] == (newest, "compacted")
    assert sequences_only(page_statements(store, A, 2, 10)[1])
    append(store)  # the newest not kept again
    short, read = page_statements(store, A, 0, 2)  # its rows are kept, the newest is not: read whole
    assert whole(read) and typed(short.events) == typed(database_page(store, A, 0, 2))


def test_pruned_deleted_and_other_connections_events_read_as_the_database_holds_them(store):
    for at in (1.0, 2.0, 3.0, 4.0):
        append(store, at=at)
    store.changes_page(A, "a", 0, 10)  # every row kept
    store.prune_events(cutoff=2.5, max_rows=1_000)  # the first two go
    assert store.changes_page(A, "a", 0, 10).events == database_page(store, A, 0, 10)
    assert [row[0] for row in store.changes_page(A, "a", 0, 10).events] == [3, 4]
    with sqlite3.connect(store.path) as other:  # another process's event, never read here
        other.execute(
            "INSERT INTO session_state_events (session_key, agent_id, kind, actor_type, summary,"
            " occurred_at, recorded_at) VALUES (?, 'a', 'compacted', 'system', 'elsewhere', 5, 5)", (A,))
    page = store.changes_page(A, "a", 0, 10).events
    assert typed(page) == typed(database_page(store, A, 0, 10)) and page[-1][4] == "elsewhere"
    with store.transaction():
        store.delete_session_data(A, "a")
    assert store.changes_page(A, "a", 0, 10) is None


def test_a_transactions_own_event_is_never_kept_for_the_event_its_sequence_goes_to(store):
    with pytest.raises(RuntimeError):
        with store.transaction():
            sequence, _ = store.append_event(A, "a", "goal_changed", "human", None, None, "rolled back", None, 1.0, 1.0, None)
            store.changes_page(A, "a", 0, 10)
            raise RuntimeError("roll back")
    assert len(store.event_rows) == 0
    again, _ = append(store, kind="compacted")
    assert again == sequence  # the rolled-back sequence is given again: a kept row would be wrong
    # what the next reads then answer is the store contract's (test_conformance.py, on every backend)


def test_the_rows_kept_are_bounded_and_the_first_kept_go_first():
    kept = EventRowCache(capacity=3)
    kept.keep([(1, "k"), (2, "k")])
    kept.keep([(2, "k"), (3, "k"), (4, "k")])
    assert len(kept) == 3
    assert kept.rows([(1,)]) is None
    assert kept.rows([(2,), (3,), (4,)]) == [(2, "k"), (3, "k"), (4, "k")]
    assert kept.rows([(3,), (5,)]) is None  # one missing: the page is read whole
