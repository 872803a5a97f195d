"""The store contract (sessionstate/store/contract.py), checked on every backend in
tests/backends.py through ``open_store``: what a new backend must do before the gateway
runs on it. Only the protocols' methods are used here, never SQL.

Sessions and heads, one global sequence counter, dedupe without a new sequence, pages, the
effective positions of cursors (R7), chunked pruning that raises the watermark first (R13),
transactions and savepoints with their after-commit callbacks (R9), deletes that take the
feature tables' rows along, the feature tables, and commits visible to a second connection."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from sessionstate import Gateway
from sessionstate.errors import StorageError, UnknownSession, UnsupportedBackend
from sessionstate.statemachine import NOTIFYING_KINDS, derive_state
from sessionstate.statemachine.table import CAUGHT_UP
from sessionstate.store import (
    MetaRecord,
    RunRecord,
    SessionRecord,
    Store,
    open_store,
)
from sessionstate.store.records import COMPLETED, FAILED, RUNNING
from tests.store.sessions import A, B, W  # the store fixture (conftest.py) creates them

NOTIFYING = "human_direct_message"
LOG_ONLY = "compacted"
_TARGETS = itertools.count()  # a fresh target per Hypothesis example (the store is shared)
# Any positions a cursor row may hold (INV1: L <= N <= M, and L = N only with N = M).
VALID_POSITIONS = st.tuples(st.integers(0, 50), st.integers(0, 5), st.integers(0, 5)).map(
    lambda d: (d[0], d[0] + d[1], d[0] + d[1] + (d[2] if d[1] else 0))
)


def append(store: Store, key: str = A, kind: str = NOTIFYING, *, actor: str | None = None,
           dedupe: str | None = None, at: float = 1.0) -> tuple[int, bool]:
    with store.transaction():
        return store.append_event(key, "a", kind, "human", actor, None, "s", None, at, at, dedupe)


def put(store: Store, watcher: str, target: str, positions: tuple[int, int, int] | None, now: float = 1.0) -> None:
    with store.transaction():
        store.put_cursors(target, "a", [(watcher, positions)], now)


def positions(store: Store, watcher: str = W, target: str = A) -> tuple[int, int, int] | None:
    record = store.cursor(watcher, target, "a")
    return record.positions if record else None


# -- the factory --------------------------------------------------------------------------


def test_the_factory_refuses_an_unknown_scheme():
    with pytest.raises(UnsupportedBackend):
        open_store("nosuchdb://localhost/x", notifying_kinds=NOTIFYING_KINDS)


# -- sessions -----------------------------------------------------------------------------


def test_a_session_starts_with_an_empty_head(store):
    assert store.head(A, "a") == (0, 0)
    assert store.get_session(A, "a").kind == "main"
    assert store.agents_with_session_key(A) == ["a"]
    assert [s.session_key for s in store.list_sessions()] == [A, B, W]


def test_delete_removes_events_head_row_and_unlinks_children(store):
    with store.transaction():
        store.insert_session(SessionRecord("agent:a:child", "a", "subagent", A, "a", None, 2.0, 2.0))
    append(store)
    append(store)
    with store.transaction():
        assert store.delete_session_data(A, "a") == 2
    assert store.get_session(A, "a") is None and store.head(A, "a") is None
    assert store.events_after(A, "a", 0, 10) == []
    assert store.get_session("agent:a:child", "a").parent_key is None


def test_delete_cascades_to_every_feature_table(store):
    with store.transaction():
        store.meta.insert(MetaRecord(A, "a", "sid-1", sandboxed=True, last_activity_at=1.0))
        store.transcripts.append(A, "a", "user", "hi", actor_type="human", actor_id=None, provenance=None,
                                 tool_calls=None, tool_result=None, input_tokens=0, output_tokens=0, created_at=1.0)
        store.runs.insert(_run("r1", child=A, requester=B))
    # A link written outside the caller's transaction (replace opens its own).
    store.links.replace(A, "a", provider="p", host="h", thread_id="t", marker=None, primed=True, now=1.0)
    assert store.meta.get(A, "a").sandboxed is True  # booleans come back as booleans
    assert store.runs.get("r1").thread is False
    with store.transaction():
        store.delete_session_data(A, "a")
    assert store.meta.get(A, "a") is None
    assert store.transcripts.recent(A, "a", 10) == []
    assert store.runs.get("r1") is None
    assert store.links.get(A, "a") is None
    # Nothing of the session is left in any feature table, not only under its own key.
    assert store.meta.dump() == [] and store.transcripts.dump() == [] and store.runs.dump() == []
    assert store.links.all() == []


# -- the signal log -----------------------------------------------------------------------


def test_sequences_are_one_global_counter_in_commit_order(store):
    assert [append(store, key)[0] for key in (A, B, A)] == [1, 2, 3]
    assert [e.sequence for e in store.events_after(A, "a", 0, 10)] == [1, 3]
    assert store.head(A, "a").last_sequence == 3
    assert store.head(B, "a") == (2, 0)  # sparse per session; nothing pruned yet
    assert store.event_count() == 3


def test_a_dedupe_hit_returns_the_old_sequence_and_consumes_none(store):
    assert append(store, dedupe="k") == (1, True)
    assert append(store, dedupe="k") == (1, False)
    assert store.head(A, "a").last_sequence == 1
    assert append(store)[0] == 2  # no sequence was used up by the duplicate
    assert store.head(A, "a").last_sequence == 2


def test_an_unknown_session_raises_and_rolls_back(store):
    before = store.dump()
    with pytest.raises(UnknownSession, match="unknown session"):
        append(store, "agent:a:ghost")
    assert store.dump() == before


def row(key: str = A, kind: str = NOTIFYING, *, dedupe: str | None = None, at: float = 1.0) -> tuple:
    return (key, "a", kind, "human", None, None, "s", None, at, at, dedupe)


def test_append_events_keeps_order_dedupe_and_the_heads_as_one_append_after_the_other(store):
    assert append(store, B, dedupe="old") == (1, True)
    rows = [row(A), row(B, dedupe="old"), row(A, dedupe="new"), row(B, at=2.0), row(A, dedupe="new"), row(A)]
    with store.transaction():
        store.lock_targets({(A, "a"), (B, "a")})
        appended = store.append_events(rows)
    # The log's first event is found by its key; the batch's repeated key finds its first row.
    assert appended == [(2, True), (1, False), (3, True), (4, True), (3, False), (5, True)]
    assert [e.sequence for e in store.events_after(A, "a", 0, 10)] == [2, 3, 5]
    assert [(e.sequence, e.recorded_at) for e in store.events_after(B, "a", 0, 10)] == [(1, 1.0), (4, 2.0)]
    assert store.head(A, "a").last_sequence == 5 and store.head(B, "a").last_sequence == 4
    assert store.sequence_high_water() == 5  # no sequence was used up by the duplicates


def test_append_events_with_an_unknown_session_raises_and_rolls_back(store):
    before = store.dump()
    with pytest.raises(UnknownSession, match="unknown session"):
        with store.transaction():
            store.append_events([row(A), row("agent:a:ghost"), row(B)])
    assert store.dump() == before


@pytest.mark.parametrize("watched", [[], [(A, "a")], [(A, "a"), (B, "a"), ("t9", "a")]])
def test_append_and_read_is_the_locks_the_appends_then_the_caught_up_read(store, watched):
    """A batch's start (one round trip on a server): ``append_events``' outcomes and
    ``caught_up_watchers_of``' rows, read after the appends in the same transaction."""
    put(store, W, A, (1, 1, 1))
    put(store, A, B, (0, 2, 2))  # pending: not caught up
    assert append(store, B, dedupe="old") == (1, True)
    rows = [row(A), row(B, dedupe="old"), row(A, dedupe="new"), row(A, dedupe="new"), row(B)]
    with store.transaction():
        appended, found = store.append_and_read(rows, watched + watched[:1])  # a target twice reads once
        again = store.caught_up_watchers_of(watched) if watched else {}
    assert appended == [(2, True), (1, False), (3, True), (3, False), (4, True)]
    assert found == again
    assert found == ({(A, "a"): [(W, (1, 1, 1), "explicit")]} if watched else {})
    assert store.head(A, "a").last_sequence == 3 and store.head(B, "a").last_sequence == 4


def test_append_and_read_with_an_unknown_session_raises_and_changes_nothing(store):
    """The server backend sends the appends before it learns a head is missing: none may
    land (a nested level's rollback keeps the outer one's work). A sequence may be left
    unused (spec section 16: gaps, never reordering)."""
    assert append(store, A) == (1, True)
    before = store.dump()
    with store.transaction():
        with pytest.raises(UnknownSession, match="unknown session"):
            with store.transaction():
                store.append_and_read([row(A), row("agent:a:ghost"), row(B)], [(A, "a")])
        sequence, inserted = store.append_event(*row(B))
    after = store.dump()
    assert inserted and sequence > 1 and store.head(B, "a").last_sequence == sequence
    assert after["session_state_events"][:-1] == before["session_state_events"]
    assert after["session_state_heads"] != before["session_state_heads"]  # B's bump only
    assert store.head(A, "a").last_sequence == 1


def test_the_changes_page_holds_the_head_the_earliest_sequence_and_an_ascending_bounded_page(store):
    for kind, actor in ((NOTIFYING, None), (LOG_ONLY, None), ("goal_changed", W), ("goal_changed", None)):
        append(store, kind=kind, actor=actor)
    read = store.changes_page(A, "a", 1, 2)
    assert (read.last_sequence, read.pruned_max_sequence, read.earliest_sequence) == (4, 0, 1)
    page = read.events
    assert [row[0] for row in page] == [2, 3]
    # contract.EventPageRow: (sequence, kind, actor_type, occurred, summary, actor_id, run_id,
    # payload), the columns changesSince shows
    assert [row[1:3] + row[4:] for row in page] == [(LOG_ONLY, "human", "s", None, None, None),
                                                    ("goal_changed", "human", "s", W, None, None)]
    # the instant (1.0 s) in whole microseconds, or the float where Python does the rounding
    assert all((type(row[3]), row[3]) in ((int, 1_000_000), (float, 1.0)) for row in page)
    assert store.changes_page(A, "a", 4, 2).events == []
    assert store.changes_page(B, "a", 0, 2) == (0, 0, None, [])  # a head, no events
    assert store.changes_page("agent:a:nobody", "a", 0, 2) is None  # no head: no session


def test_a_page_read_in_a_rolled_back_transaction_leaves_nothing_the_next_commit_reads(store):
    # SQLite gives the rolled-back sequence to the next event (store/event_rows.py keeps
    # nothing a transaction reads for that reason); PostgreSQL gives the next one.
    with pytest.raises(RuntimeError):
        with store.transaction():
            sequence, _ = store.append_event(A, "a", "goal_changed", "human", None, None, "rolled back", None, 1.0, 1.0, None)
            assert store.changes_page(A, "a", 0, 10).events[-1][4] == "rolled back"  # its own, visible to it
            raise RuntimeError("roll back")
    committed, _ = append(store, kind=LOG_ONLY)
    assert committed >= sequence
    for _ in range(2):  # read whole, then (SQLite) from the rows kept
        assert [(row[0], row[1], row[4]) for row in store.changes_page(A, "a", 0, 10).events] == [(committed, LOG_ONLY, "s")]


# -- cursors: effective positions (R7) ------------------------------------------------------


def test_a_pending_cursor_reads_the_newest_notifying_event_by_another_actor(store):
    put(store, W, A, (0, 1, 1))
    append(store)  # 1
    append(store)  # 2: notifying, no actor: counts
    assert positions(store) == (0, 1, 2)
    append(store, kind=LOG_ONLY)  # 3: log-only: does not count
    append(store, actor=W)  # 4: the watcher's own: does not count
    append(store, B)  # 5: another target: does not count
    assert positions(store) == (0, 1, 2)
    append(store, actor="agent:a:someone")  # 6
    assert positions(store) == (0, 1, 6)


def test_a_caught_up_cursor_reads_its_stored_positions(store):
    append(store)
    put(store, W, A, (1, 1, 1))
    append(store)
    assert positions(store) == (1, 1, 1)
    assert store.caught_up_watchers(A, "a") == [(W, (1, 1, 1), "explicit")]


def test_caught_up_watchers_leaves_out_pending_cursors(store):
    # Watchers and target need not be sessions for the lookup (it reads the cursor rows only).
    rows = [("w1", 1, 1, 1), ("w2", 1, 5, 5), ("w3", 2, 2, 2), ("w4", 2, 3, 9)]
    with store.transaction():
        store.put_cursors("t", "a", [(w, (l, n, m)) for w, l, n, m in rows], 1.0)
    assert sorted(store.caught_up_watchers("t", "a")) == [("w1", (1, 1, 1), "explicit"), ("w3", (2, 2, 2), "explicit")]


def test_the_caught_up_read_carries_each_pair_s_provenance(store):
    """R26's wake decision takes the provenance from the event's own caught-up read (no read
    per notice), so the read must return the stored one, ambient and spawn included."""
    with store.transaction():
        store.put_cursors("t", "a", [("w1", (1, 1, 1)), ("w2", (1, 1, 1)), ("w3", (1, 1, 1))], 1.0)
        store.set_provenance("w1", "t", "a", "ambient", promote_only=False)
        store.set_provenance("w2", "t", "a", "spawn", promote_only=False)
        one = sorted(store.caught_up_watchers("t", "a"))
        several = sorted(store.caught_up_watchers_of([("t", "a"), ("u", "a")])[("t", "a")])
    assert one == several == [("w1", (1, 1, 1), "ambient"), ("w2", (1, 1, 1), "spawn"), ("w3", (1, 1, 1), "explicit")]
    assert [store.cursor_provenance(w, "t", "a") for w, _, _ in one] == ["ambient", "spawn", "explicit"]


def test_caught_up_watchers_of_several_targets_is_each_targets_own_read(store):
    """A group commit's one read: per target exactly ``caught_up_watchers``' rows in its
    order; a target without caught-up cursors is left out, pending cursors are not read."""
    rows = {"t1": [("w3", 1, 1, 1), ("w1", 2, 2, 2), ("w2", 1, 4, 4)], "t2": [("w1", 0, 0, 0)],
            "t3": [("w4", 0, 2, 2)]}
    with store.transaction():
        for target, cursors in rows.items():
            store.put_cursors(target, "a", [(w, (l, n, m)) for w, l, n, m in cursors], 1.0)
    targets = [("t1", "a"), ("t2", "a"), ("t3", "a"), ("t9", "a")]
    with store.transaction():
        found = store.caught_up_watchers_of(targets)
        each = {t: store.caught_up_watchers(*t) for t in targets}
    assert found == {t: r for t, r in each.items() if r}
    assert sorted(found) == [("t1", "a"), ("t2", "a")]
    assert sorted(found[("t1", "a")]) == [("w1", (2, 2, 2), "explicit"), ("w3", (1, 1, 1), "explicit")]


@given(rows=st.lists(VALID_POSITIONS, min_size=1, max_size=8))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_stores_caught_up_cursors_are_the_statemachines_caught_up_state(store, rows):
    """One definition of caught up: the rows the event path's reads return (SQL) are exactly
    the cursors whose positions ``derive_state`` calls CAUGHT_UP (a batch decides in memory
    with the latter, one event alone reads with the former)."""
    target = f"t{next(_TARGETS)}"
    cursors = [(f"w{i}", positions) for i, positions in enumerate(rows)]
    with store.transaction():
        store.put_cursors(target, "a", cursors, 1.0)
        one = store.caught_up_watchers(target, "a")
        several = store.caught_up_watchers_of([(target, "a")]).get((target, "a"), [])
    expected = sorted((w, p, "explicit") for w, p in cursors if derive_state(p) == CAUGHT_UP)
    assert sorted(one) == sorted(several) == expected


def test_put_pair_cursors_writes_several_targets_each_pair_at_its_last_positions(store):
    with store.transaction():
        store.put_cursors("t1", "a", [("w1", (0, 0, 0)), ("w2", (0, 0, 0))], 1.0)
    changes = [("w1", ("t1", "a"), (1, 1, 1)), ("w1", ("t2", "a"), (0, 2, 2)), ("w2", ("t1", "a"), None),
               ("w1", ("t1", "a"), (3, 3, 3)), ("w3", ("t2", "a"), (0, 0, 0))]
    with store.transaction():
        store.put_pair_cursors(changes, 2.0)
    got = {(c.watcher, c.target_key): (c.positions, c.updated_at) for c in store.all_cursors()}
    assert got == {("w1", "t1"): ((3, 3, 3), 2.0), ("w1", "t2"): ((0, 2, 2), 2.0), ("w3", "t2"): ((0, 0, 0), 2.0)}
    with store.transaction():
        store.put_pair_cursors([("w3", ("t2", "a"), (1, 1, 1))], 3.0)  # one pair alone
    assert store.cursor("w3", "t2", "a").positions == (1, 1, 1)


@pytest.mark.parametrize("count", [2, 3, 16, 17, 40])  # one statement up to 16 rows on PostgreSQL, then executemany
def test_one_put_writes_every_cursor_and_a_repeated_watcher_ends_at_its_last_positions(store, count):
    with store.transaction():
        store.put_cursors("t", "a", [(f"w{i}", (0, 0, 0)) for i in range(count)], 1.0)
    changes = [(f"w{i}", (i, i + 1, i + 2)) for i in range(count)] + [("w0", (7, 8, 9)), ("w1", None)]
    with store.transaction():
        store.put_cursors("t", "a", changes, 2.0)
    expected = {f"w{i}": (i, i + 1, i + 2) for i in range(2, count)} | {"w0": (7, 8, 9)}
    assert {c.watcher: c.positions for c in store.cursors_naming("t", "a")} == expected
    assert all(c.updated_at == 2.0 for c in store.cursors_naming("t", "a"))


def test_cursor_queries_by_holder_naming_and_pending(store):
    put(store, W, A, (0, 1, 1))
    put(store, W, B, (0, 0, 0))
    put(store, B, A, (0, 0, 0))
    put(store, "agent:a:gone", A, (0, 1, 1))  # a watcher that is no session
    assert [(c.watcher, c.target_key) for c in store.cursors_behind()] == [(W, A)]
    assert [c.target_key for c in store.cursors_held_by(W)] == [A, B]
    assert [(c.watcher, c.target_key) for c in store.cursors_naming(B, "a")] == [(B, A), (W, B)]  # by watcher
    assert len(store.all_cursors()) == 4
    put(store, W, A, None)
    assert positions(store) is None


def test_pending_cursors_held_by_reads_only_the_pending_ones_with_effective_positions(store):
    """The drain's one read: W's pending cursors, in target order, material raised by a
    notifying event of another actor after ``notified`` (R7), in a transaction and out."""
    first, _ = append(store, A)
    put(store, W, A, (0, first, first))
    put(store, W, B, (0, 0, 0))  # caught up: left out
    put(store, B, A, (0, first, first))  # another watcher's: left out
    later, _ = append(store, A)  # material for W
    append(store, A, actor=W)  # W's own: not material for W
    assert [(c.target_key, c.positions) for c in store.pending_cursors_held_by(W)] == [(A, (0, first, later))]
    with store.transaction():
        store.lock_watcher_targets(W)
        assert [c.positions for c in store.pending_cursors_held_by(W)] == [(0, first, later)]
    put(store, W, B, (0, 2, 2))
    assert [c.target_key for c in store.pending_cursors_held_by(W)] == [A, B]


def test_expired_cursors_need_an_old_row_and_an_old_target_head(store):
    put(store, W, A, (0, 0, 0), now=1.0)
    put(store, W, B, (0, 0, 0), now=1.0)
    append(store, B, at=50.0)  # B's head moved recently
    assert [c.target_key for c in store.expired_cursors(10.0)] == [A]


# -- retention (R7, R13) ------------------------------------------------------------------


def test_pruning_writes_the_effective_watermark_before_deleting(store):
    put(store, W, A, (0, 1, 1))
    for at in (1.0, 2.0, 3.0):
        append(store, at=at)
    assert positions(store) == (0, 1, 3)
    counts = store.prune_events(cutoff=100.0, max_rows=1_000, chunk_rows=2)
    assert counts == {"events": 3, "chunks": 2}  # by age, in chunks of 2: 2 + 1
    assert store.event_count() == 0
    assert positions(store) == (0, 1, 3)  # kept in the row, not lost with the log
    assert store.head(A, "a") == (3, 3)  # heads stay; the pruned watermark rose


def test_the_row_cap_keeps_the_newest_and_sequences_are_never_reused(store):
    for _ in range(5):
        append(store)
    store.prune_events(cutoff=0.0, max_rows=2)
    assert [e.sequence for e in store.events_after(A, "a", 0, 10)] == [4, 5]
    assert store.head(A, "a").pruned_max_sequence == 3
    assert append(store)[0] == 6


def test_pruning_in_chunks_keeps_the_newest_and_raises_each_sessions_watermark(store):
    seqs = [append(store, A if i % 2 else B)[0] for i in range(25)]
    result = store.prune_events(cutoff=0.0, max_rows=5, chunk_rows=4)
    assert result == {"events": 20, "chunks": 5}
    assert store.event_count() == 5
    kept = {e.sequence for k in (A, B) for e in store.events_after(k, "a", 0, 100)}
    assert kept == set(seqs[-5:])
    assert store.head(A, "a").pruned_max_sequence == max(s for i, s in enumerate(seqs[:20]) if i % 2)
    assert store.head(B, "a").pruned_max_sequence == max(s for i, s in enumerate(seqs[:20]) if not i % 2)
    assert store.integrity_check() == "ok"


def test_pruning_by_age_keeps_newer_events_and_the_pending_material(store):
    frozen = append(store, kind=LOG_ONLY, at=1.0)[0]
    put(store, B, A, (0, frozen, frozen))
    notifying = append(store, at=2.0)[0]
    late = append(store, kind=LOG_ONLY, at=100.0)[0]
    assert positions(store, B, A) == (0, frozen, notifying)
    assert store.prune_events(cutoff=50.0, max_rows=1000)["events"] == 2
    # The deleted event's material position survives in the cursor row (R7 write-back).
    assert positions(store, B, A) == (0, frozen, notifying)
    assert [e.sequence for e in store.events_after(A, "a", 0, 10)] == [late]
    assert store.head(A, "a").pruned_max_sequence == notifying


# -- maintenance --------------------------------------------------------------------------


def test_vacuum_shrinks_the_storage_after_pruning_and_keeps_every_row(store):
    with store.transaction():
        for _ in range(3_000):
            store.append_event(A, "a", LOG_ONLY, "system", None, None, "s" * 200, None, 1.0, 1.0, None)
    store.prune_events(cutoff=0.0, max_rows=100)
    before = store.dump()
    report = store.vacuum()
    assert report.bytes_after < report.bytes_before, report
    assert report.detail
    assert store.dump() == before
    assert store.integrity_check() == "ok"


def test_vacuum_inside_a_transaction_is_refused(store):
    with store.transaction():
        append(store)
        with pytest.raises(StorageError):
            store.vacuum()
    assert store.event_count() == 1  # the transaction went on and committed


# -- the unit of work (R9) ----------------------------------------------------------------


def test_after_commit_runs_after_the_outermost_commit_only(store):
    seen: list[str] = []
    with store.transaction():
        store.after_commit(lambda: seen.append("outer"))
        with store.transaction():
            store.after_commit(lambda: seen.append("inner"))
        assert seen == [] and store.in_transaction
    assert seen == ["outer", "inner"] and not store.in_transaction
    store.after_commit(lambda: seen.append("now"))  # outside a transaction: at once
    assert seen[-1] == "now"


def test_a_rollback_drops_its_writes_and_its_callbacks(store):
    seen: list[str] = []
    before = store.dump()
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.append_event(A, "a", NOTIFYING, "human", None, None, "s", None, 1.0, 1.0, None)
            put(store, W, A, (0, 1, 1))  # a nested write goes too
            store.after_commit(lambda: seen.append("dropped"))
            raise RuntimeError("boom")
    assert seen == [] and store.dump() == before
    assert not store.in_transaction


def test_a_savepoint_rollback_keeps_the_outer_work_and_drops_its_own_callbacks(store):
    seen: list[str] = []
    with store.transaction():
        store.append_event(A, "a", NOTIFYING, "human", None, None, "kept", None, 1.0, 1.0, None)
        store.after_commit(lambda: seen.append("outer"))
        with pytest.raises(RuntimeError):
            with store.transaction():
                store.append_event(A, "a", NOTIFYING, "human", None, None, "gone", None, 1.0, 1.0, None)
                store.after_commit(lambda: seen.append("inner"))
                raise RuntimeError("inner fails")
        # The outer transaction goes on after its savepoint rolled back.
        store.append_event(A, "a", NOTIFYING, "human", None, None, "after", None, 1.0, 1.0, None)
    assert seen == ["outer"]
    assert [e.summary for e in store.events_after(A, "a", 0, 10)] == ["kept", "after"]


def test_a_session_row_already_there_is_not_inserted_again(store):
    # spec 13, a create race: the second row inserts nothing and says so (the protocol raises
    # SessionExists), where it used to be the database's unique violation.
    before = store.dump()
    with store.transaction():
        assert store.insert_session(SessionRecord(A, "a", "subagent", None, None, None, 2.0, 2.0)) is False
    assert store.get_session(A, "a").created_at == 1.0  # the first row stays as it was
    assert store.dump() == before
    with store.transaction():
        assert store.insert_session(SessionRecord("agent:a:new", "a", "main", None, None, None, 3.0, 3.0)) is True
    assert store.get_session("agent:a:new", "a").created_at == 3.0


# -- feature tables -----------------------------------------------------------------------


def _run(run_id: str, *, child: str = B, requester: str = A, created: float = 1.0) -> RunRecord:
    return RunRecord(run_id, requester, "a", child, "a", "subagent", "task", None, None, None, False,
                     "isolated", None, RUNNING, None, None, None, None, 0, created, None)


def test_metadata_rows(store):
    with store.transaction():
        store.meta.insert(MetaRecord(A, "a", "sid-1", sandboxed=True, last_activity_at=1.0))
        store.meta.update(A, "a", model_override="m", last_channel="c")
        store.meta.add_usage(A, "a", 3, 4)
    row = store.meta.get(A, "a")
    assert (row.model_override, row.last_channel, row.input_tokens, row.output_tokens, row.sandboxed) == ("m", "c", 3, 4, True)
    assert store.meta.by_session_id("sid-1") == row
    assert store.meta.all() == {(A, "a"): row}
    with pytest.raises(ValueError):
        store.meta.update(A, "a", session_id="other")


def test_runs_end_once(store):
    with store.transaction():
        store.runs.insert(_run("r1", created=1.0))
        store.runs.insert(_run("r2", created=2.0))
    assert [r.run_id for r in store.runs.by_requester(A, "a", 10)] == ["r2", "r1"]
    assert [r.run_id for r in store.runs.active_by_requester(A, "a")] == ["r1", "r2"]
    with store.transaction():
        assert store.runs.note_steered("r1")
        assert store.runs.finish("r1", COMPLETED, None, "done", 5.0)
        assert not store.runs.finish("r1", FAILED, "timeout", None, 6.0)  # the first end wins
        assert not store.runs.note_steered("r1")
    run = store.runs.get("r1")
    assert (run.status, run.result_text, run.steer_count, run.ended_at) == (COMPLETED, "done", 1, 5.0)
    assert [r.run_id for r in store.runs.active()] == ["r2"]
    assert [r.run_id for r in store.runs.by_child(B, "a")] == ["r2", "r1"]


def test_transcripts_keep_append_order(store):
    with store.transaction():
        for index, role in enumerate(("user", "assistant", "user")):
            store.transcripts.append(A, "a", role, f"m{index}", actor_type="human", actor_id=None,
                                     provenance={"kind": "x"} if index == 0 else None, tool_calls=None,
                                     tool_result=None, input_tokens=0, output_tokens=0, created_at=float(index))
    assert [m.text for m in store.transcripts.recent(A, "a", 2)] == ["m1", "m2"]
    assert store.transcripts.recent(A, "a", 5)[0].provenance == {"kind": "x"}
    assert store.transcripts.recent_texts(A, "a", "user", 5) == ["m0", "m2"]
    assert store.transcripts.first_text(A, "a", "user") == "m0"
    assert store.transcripts.stats(A, "a") == (3, 2.0)


def test_upstream_links_are_compare_and_set(store):
    with store.transaction():
        first = store.links.replace(A, "a", provider="p", host="h", thread_id="t", marker=None, primed=False, now=1.0)
    link = store.links.get(A, "a")
    assert link.generation == first and store.links.by_thread("p", "t") == link
    assert store.links.watched() == []
    put(store, W, A, (0, 0, 0))
    assert store.links.watched() == [link]
    with store.transaction():
        assert store.links.advance(link, "m1", 2.0)
        assert not store.links.miss(link, 3.0)  # the version moved: a stale write changes nothing
    with store.transaction():
        second = store.links.replace(A, "a", provider="p", host="h", thread_id="t", marker=None, primed=False, now=4.0)
    assert second > first  # generations are never reused
    assert not store.links.drop(link)
    assert [l.generation for l in store.links.all()] == [second]


# -- other connections ----------------------------------------------------------------------


def test_a_second_connection_sees_committed_events(db_url):
    with Gateway.open(db_url) as gw, Gateway.open(db_url) as other:
        gw.create_session(A)
        seq = gw.record_event(A, "goal_changed", actor_type="human", summary="goal set")
        assert other.ops.state_version(A) == seq
        page = other.session_status(A, changes_since=0)["stateChanges"]["events"]
        assert [(e["sequence"], e["kind"]) for e in page] == [(seq - 1, "created"), (seq, "goal_changed")]  # R27


# Found by mutmut over store/sql_store.py (docs/verification.md): contract points the store's
# own tests did not pin down, though the gateway's tests reach them through the services.

def test_the_high_water_is_0_before_any_append(store):
    assert store.sequence_high_water() == 0
    append(store)
    assert store.sequence_high_water() == 1


def test_has_watchers_is_any_cursor_on_the_target(store):
    assert store.has_watchers(A, "a") is False
    put(store, W, A, (2, 5, 5))  # pending counts too (R24: any cursor)
    assert store.has_watchers(A, "a") is True
    assert store.has_watchers(B, "a") is False
    assert store.has_watchers(A, "other") is False


def test_set_provenance_says_whether_the_row_changed(store):
    put(store, W, A, (1, 1, 1))
    with store.transaction():
        assert store.set_provenance(W, A, "a", "ambient", promote_only=False) is True
        assert store.set_provenance(W, A, "a", "explicit", promote_only=True) is True   # over ambient
        assert store.set_provenance(W, A, "a", "ambient", promote_only=True) is False   # never demotes
        assert store.set_provenance(W, B, "a", "explicit", promote_only=False) is False  # no cursor
    assert store.cursor_provenance(W, A, "a") == "explicit"
    assert store.cursor_provenance(W, B, "a") is None
