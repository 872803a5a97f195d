"""The serving table (store/serving.py): the answers of claims and wake slots read back exactly
(both backends), and on SQLite the cursor change log a pump reads (R22): one row per watcher,
how often it is trimmed, and the gap a pump left behind a trim is told of."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SessionRecord, Store, open_store
from sessionstate.store.serving import CHANGE_LOG_KEEP, CHANGE_LOG_TRIM_EVERY
from sessionstate.store.sqlite import SqliteStore
from tests.store.sessions import A

KINDS = tuple(NOTIFYING_KINDS)
NOTIFYING = "human_direct_message"


def append(store: Store, key: str = A, actor: str | None = None) -> int:
    with store.transaction():
        sequence, _ = store.append_event(key, "a", NOTIFYING, "human", actor, None, "s", None, 1.0, 1.0, None)
    return sequence


# -- claims and wake slots, both backends ---------------------------------------------------


def test_the_claimant_is_the_last_server_to_claim_with_the_generation_counted_up(store):
    """R20: ``claimant`` names the server and the generation of its claim, and only the
    holder's ``unclaim`` drops it (and says so)."""
    serving = store.serving
    with store.transaction():
        assert serving.claim(A, "server-1", 1.0) == 1
    assert serving.claimant(A) == ("server-1", 1)
    with store.transaction():
        assert serving.claim(A, "server-2", 2.0) == 2
    assert serving.claimant(A) == ("server-2", 2)
    with store.transaction():
        assert serving.unclaim(A, "server-1", 3.0) is False
    assert serving.claimant(A) == ("server-2", 2)
    with store.transaction():
        assert serving.unclaim(A, "server-2", 4.0) is True
    assert serving.claimant(A) is None
    assert serving.all_claims() == {}


def test_a_wake_slot_is_won_once_per_window_and_every_slot_reads_back(store):
    """R23: the first wake takes the slot; one inside the window loses and is told the time
    of the wake that holds it; one a whole window later (exactly) wins again. ``wake_slots``
    (the operators' view) holds each watcher's last wake."""
    serving = store.serving
    assert serving.take_wake_slot("watcher-1", 100.0, 20.0) == (True, 100.0)
    assert serving.take_wake_slot("watcher-1", 119.5, 20.0) == (False, 100.0)
    assert serving.take_wake_slot("watcher-1", 120.0, 20.0) == (True, 120.0)
    assert serving.take_wake_slot("watcher-2", 121.0, 20.0) == (True, 121.0)
    assert serving.wake_slots() == {"watcher-1": 120.0, "watcher-2": 121.0}


def test_a_pump_starting_on_a_fresh_log_begins_at_zero_and_later_after_the_newest_event(store):
    """``watermarks``: (0, 0) before any event or change row, then the log's high water."""
    assert store.serving.watermarks() == (0, 0)
    append(store)
    sequence = append(store)
    assert store.serving.watermarks()[0] == sequence


# -- the change log and the sweep's reads, SQLite (PostgreSQL notifies instead) --------------


@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[SqliteStore]:
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}", notifying_kinds=NOTIFYING_KINDS)
    assert isinstance(store, SqliteStore)
    with store.transaction():
        store.insert_session(SessionRecord(A, "a", "main", None, None, None, 1.0, 1.0))
    yield store
    store.close()


def note(store: SqliteStore, watchers: list[str], now: float = 1.0) -> None:
    with store.transaction():
        store.serving.note_cursor_changes(watchers, now)


def test_several_watchers_noted_at_once_are_each_noted_once_and_read_by_the_next_sweep(file_store):
    serving = file_store.serving
    sequence = append(file_store)
    note(file_store, ["watcher-1", "watcher-2", "watcher-1", "watcher-3"])
    assert serving.watermarks() == (sequence, 3)
    snapshot = serving.read_sweep(0, 0, KINDS)
    assert snapshot.log_sequence == sequence
    assert snapshot.change_stamp == 3
    assert sorted(snapshot.changed_watchers) == ["watcher-1", "watcher-2", "watcher-3"]
    assert snapshot.gap is False
    # A sweep from where this one ended finds nothing new.
    again = serving.read_sweep(snapshot.log_sequence, snapshot.change_stamp, KINDS)
    assert (again.log_sequence, again.change_stamp, again.changed_watchers, again.gap) == (sequence, 3, [], False)


def test_noting_one_watcher_is_one_statement_and_the_log_is_trimmed_once_per_thousand(file_store):
    """A drain notes its one watcher with a single INSERT (no second statement for the new
    stamp), and the log is trimmed only when a stamp crosses a multiple of the trim step."""
    notes = 2 * CHANGE_LOG_TRIM_EVERY + CHANGE_LOG_TRIM_EVERY // 2
    with file_store.transaction(), file_store.trace_statements() as statements:
        for n in range(notes):
            file_store.serving.note_cursor_changes([f"watcher-{n}"], 1.0)
    on_the_log = [s.split(" ", 1)[0] for s in statements if "session_cursor_changes" in s]
    assert on_the_log.count("INSERT") == notes
    assert on_the_log.count("DELETE") == 2
    assert len(on_the_log) == notes + 2
    assert not [s for s in statements if "last_insert_rowid" in s]


def test_a_sweep_behind_a_trim_is_told_of_the_gap_and_one_at_the_trim_is_not(file_store):
    """R22: the log keeps CHANGE_LOG_KEEP rows; a pump whose stamp is below the oldest row
    left minus one has missed rows and must resynchronise; one at that stamp has missed none."""
    serving = file_store.serving
    total = CHANGE_LOG_KEEP + CHANGE_LOG_TRIM_EVERY
    note(file_store, [f"watcher-{n}" for n in range(total)])
    trimmed_to = total - CHANGE_LOG_KEEP  # stamps up to here are gone
    assert serving.watermarks()[1] == total
    assert serving.read_sweep(0, 0, KINDS).gap is True
    assert serving.read_sweep(0, trimmed_to - 1, KINDS).gap is True
    at_the_trim = serving.read_sweep(0, trimmed_to, KINDS)
    assert at_the_trim.gap is False
    assert len(at_the_trim.changed_watchers) == CHANGE_LOG_KEEP
    assert at_the_trim.change_stamp == total
