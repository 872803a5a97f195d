"""The store contract, on every backend (tests/backends.py): what the gateway relies on.

Transactions and savepoints, global sparse sequences, dedupe without a new sequence, heads,
pages, the caught-up read, chunked pruning that raises the watermark first, deletes that take
the feature tables' rows along, and commits visible to a second connection.
"""

from __future__ import annotations

import pytest

from sessionstate import Gateway, SessionStateError
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SessionRecord
from sessionstate.store.factory import open_store
from sessionstate.store.runs import RunRecord
from sessionstate.store.session_meta import MetaRecord


@pytest.fixture
def store(db_url):
    s = open_store(db_url, notifying_kinds=NOTIFYING_KINDS)
    with s.transaction():
        for key in ("agent:a:one", "agent:a:two"):
            s.insert_session(SessionRecord(key, "a", "main", None, None, None, 1.0, 1.0))
    yield s
    s.close()


def append(store, key="agent:a:one", kind="human_direct_message", dedupe=None, at=1.0, actor=None):
    with store.transaction():
        return store.append_event(key, "a", kind, "human", actor, None, "s", None, at, at, dedupe)


def test_sequences_are_global_and_sparse_per_session(store):
    one = append(store)[0]
    two = append(store, key="agent:a:two")[0]
    three = append(store)[0]
    assert one < two < three
    assert [e.sequence for e in store.events_after("agent:a:one", "a", 0, 10)] == [one, three]
    assert store.head("agent:a:one", "a").last_sequence == three
    assert store.head("agent:a:two", "a") == (two, 0)
    assert store.event_count() == 3


def test_nested_atomic_rolls_back_only_the_savepoint(store):
    with store.transaction():
        store.append_event("agent:a:one", "a", "compacted", "system", None, None, "kept", None, 1, 1, None)
        with pytest.raises(RuntimeError):
            with store.transaction():
                store.append_event("agent:a:one", "a", "compacted", "system", None, None, "gone", None, 1, 1, None)
                raise RuntimeError("boom")
        store.append_event("agent:a:one", "a", "compacted", "system", None, None, "after", None, 1, 1, None)
    assert [e.summary for e in store.events_after("agent:a:one", "a", 0, 10)] == ["kept", "after"]


def test_outer_failure_rolls_back_everything(store):
    before = store.dump()
    with pytest.raises(ValueError):
        with store.transaction():
            store.append_event("agent:a:one", "a", "compacted", "system", None, None, "x", None, 1, 1, None)
            raise ValueError("boom")
    assert store.dump() == before
    assert not store.in_transaction


def test_unknown_session_append_raises_and_rolls_back(store):
    before = store.dump()
    with pytest.raises(SessionStateError, match="unknown session"):
        append(store, key="agent:a:ghost")
    assert store.dump() == before


def test_dedupe_returns_existing_without_consuming_a_sequence(store):
    first, inserted = append(store, dedupe="k")
    assert inserted
    assert append(store, dedupe="k") == (first, False)
    assert append(store)[0] == first + 1
    assert store.head("agent:a:one", "a").last_sequence == first + 1


def test_duplicate_session_is_refused(store):
    with pytest.raises(Exception):
        with store.transaction():
            store.insert_session(SessionRecord("agent:a:one", "a", "main", None, None, None, 2.0, 2.0))
    assert store.get_session("agent:a:one", "a").created_at == 1.0


def test_pages_earliest_and_cursor_reads(store):
    seqs = [append(store, kind=k, actor=a)[0] for k, a in (
        ("human_direct_message", None), ("compacted", None), ("goal_changed", "agent:a:w"), ("goal_changed", None))]
    page = store.event_page("agent:a:one", "a", seqs[0], 2)
    assert [row[0] for row in page] == seqs[1:3]
    assert page[0][1:3] == ("compacted", "human")
    assert store.earliest_sequence("agent:a:one", "a") == seqs[0]
    assert store.earliest_sequence("agent:a:two", "a") is None
    with store.transaction():
        store.put_cursors("agent:a:one", "a", [("agent:a:w", (seqs[0], seqs[0], seqs[0])),
                                                ("agent:a:v", (0, seqs[0], seqs[0]))], 5.0)
    # R7: a pending cursor's material is the newest notifying event after N by someone else.
    assert store.cursor("agent:a:v", "agent:a:one", "a").positions == (0, seqs[0], seqs[3])
    assert store.cursor("agent:a:w", "agent:a:one", "a").positions == (seqs[0],) * 3
    assert [r.watcher for r in store.cursors_behind()] == []  # neither watcher is a session
    assert [r.watcher for r in store.cursors_naming("agent:a:one", "a")] == ["agent:a:v", "agent:a:w"]
    assert store.caught_up_watchers("agent:a:one", "a") == [("agent:a:w", (seqs[0],) * 3)]
    with store.transaction():
        store.put_cursors("agent:a:one", "a", [("agent:a:w", None)], 6.0)
    assert store.cursor("agent:a:w", "agent:a:one", "a") is None


def test_caught_up_lookup_returns_only_caught_up_cursors(store):
    rows = [("w1", 1, 1, 1), ("w2", 1, 5, 5), ("w3", 2, 2, 2), ("w4", 2, 3, 9)]
    with store.transaction():
        store.put_cursors("t", "a", [(w, (l, n, m)) for w, l, n, m in rows], 1.0)
    assert sorted(store.caught_up_watchers("t", "a")) == [("w1", (1, 1, 1)), ("w3", (2, 2, 2))]


def test_prune_in_chunks_raises_the_watermark_first(store):
    seqs = [append(store, key=("agent:a:one" if i % 2 else "agent:a:two"))[0] for i in range(25)]
    result = store.prune_events(cutoff=0.0, max_rows=5, chunk_rows=4)
    assert result["events"] == 20
    assert result["chunks"] == 5
    assert store.event_count() == 5
    kept = {e.sequence for k in ("agent:a:one", "agent:a:two") for e in store.events_after(k, "a", 0, 100)}
    assert kept == set(seqs[-5:])
    one_deleted = max(s for i, s in enumerate(seqs[:20]) if i % 2)
    assert store.head("agent:a:one", "a").pruned_max_sequence == one_deleted
    assert store.integrity_check() == "ok"


def test_prune_by_age_keeps_pending_material(store):
    frozen = append(store, kind="compacted", at=1.0)[0]
    with store.transaction():
        store.put_cursors("agent:a:one", "a", [("agent:a:two", (0, frozen, frozen))], 1.0)
    notifying = append(store, at=2.0)[0]
    late = append(store, kind="compacted", at=100.0)[0]
    assert store.cursor("agent:a:two", "agent:a:one", "a").positions == (0, frozen, notifying)
    assert store.prune_events(cutoff=50.0, max_rows=1000)["events"] == 2
    # The deleted event's material position survives in the cursor row (R7 write-back).
    assert store.cursor("agent:a:two", "agent:a:one", "a").positions == (0, frozen, notifying)
    assert [e.sequence for e in store.events_after("agent:a:one", "a", 0, 10)] == [late]
    assert store.head("agent:a:one", "a").pruned_max_sequence == notifying


def test_delete_takes_the_feature_rows_along(store):
    meta, runs, transcripts, links = store.meta, store.runs, store.transcripts, store.links
    with store.transaction():
        meta.insert(MetaRecord("agent:a:one", "a", "sid-1", sandboxed=True, last_activity_at=1.0))
        transcripts.append("agent:a:one", "a", "user", "hi", actor_type="human", actor_id=None, provenance=None,
                           tool_calls=None, tool_result=None, input_tokens=0, output_tokens=0, created_at=1.0)
        runs.insert(RunRecord("r1", "agent:a:two", "a", "agent:a:one", "a", "subagent", "task", None, None, None,
                              False, "isolated", None, "running", None, None, None, None, 0, 1.0, None))
    links.replace("agent:a:one", "a", provider="p", host="h", thread_id="t", marker=None, primed=True, now=1.0)
    assert meta.get("agent:a:one", "a").sandboxed is True
    assert runs.get("r1").thread is False
    with store.transaction():
        store.delete_session_data("agent:a:one", "a")
    assert meta.dump() == [] and transcripts.dump() == [] and runs.dump() == [] and links.all() == []


def test_a_second_connection_sees_committed_events(db_url):
    with Gateway.open(db_url) as gw, Gateway.open(db_url) as other:
        gw.create_session("agent:a:one")
        seq = gw.record_event("agent:a:one", "goal_changed", actor_type="human", summary="goal set")
        assert other.state_version("agent:a:one") == seq
        page = other.session_status("agent:a:one", changes_since=0)["stateChanges"]["events"]
        assert [e["sequence"] for e in page] == [seq]
