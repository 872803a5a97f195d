"""The notifying kinds a store is opened with, as its cursor reads use them (spec R7), on every
backend (sessionstate/store/statements.py): a kind holding a quote is matched as written (it is
quoted as an SQL literal), and a store opened with no notifying kind still reads the stored
material."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from sessionstate.store import SessionRecord, Store, open_store
from tests.backends import Backend

A, W = "agent:a:one", "agent:a:watcher"


@contextmanager
def _store(backend: Backend, kinds: Iterable[str]) -> Iterator[Store]:
    with backend.database() as url:
        store = open_store(url, notifying_kinds=kinds)
        try:
            with store.transaction():
                for key in (A, W):
                    store.insert_session(SessionRecord(key, "a", "main", None, None, None, 1.0, 1.0))
            yield store
        finally:
            store.close()


def _append(store: Store, kind: str) -> int:
    with store.transaction():
        sequence, _ = store.append_event(A, "a", kind, "human", None, None, "s", None, 1.0, 1.0, None)
    return sequence


def _pending_material(store: Store) -> int:
    """W's effective material on A, read the three ways a pending cursor is read."""
    record = store.cursor(W, A, "a")
    assert record is not None
    assert store.pending_cursors_held_by(W) == [record] and store.cursors_behind() == [record]
    return record.positions[2]


def test_a_notifying_kind_with_a_quote_in_it_is_matched_as_written(backend):
    """A kind holding an apostrophe is one of the notifying kinds exactly as spelled: an
    event of that kind raises a pending cursor's material (R7), one of a kind that differs
    only in the quoting does not."""
    with _store(backend, ["owner's note", "plain"]) as store:
        notified = _append(store, "plain")
        with store.transaction():
            store.put_cursors(A, "a", [(W, (0, notified, notified))], 1.0)
        quoted = _append(store, "owner's note")
        assert _pending_material(store) == quoted > notified
        _append(store, "owner''s note")
        _append(store, "owners note")
        assert _pending_material(store) == quoted
        assert _append(store, "plain") == _pending_material(store)


def test_a_store_with_no_notifying_kind_reads_the_stored_material(backend):
    """Opened with no notifying kind, a store reads every pending cursor at its stored
    material: no event raises it."""
    with _store(backend, []) as store:
        notified = _append(store, "goal_changed")
        with store.transaction():
            store.put_cursors(A, "a", [(W, (0, notified, notified))], 1.0)
        _append(store, "human_direct_message")
        _append(store, "goal_changed")
        assert _pending_material(store) == notified
