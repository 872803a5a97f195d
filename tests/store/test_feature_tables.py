"""The feature tables of the store contract, read back field by field on every backend:
session metadata, child runs, transcripts and upstream links (sessionstate/store/contract.py).

Every column comes back in its own field, a flag reads back as written, a row that is not
there reads as ``None`` rather than raising, a compare-and-set says whether it wrote, and a
write the database refuses is a ``StorageError``. Only the store's protocol methods are used
here, never SQL."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy.engine import make_url

from sessionstate.errors import StorageError, StorageUnavailable
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import MessageRecord, MetaRecord, RunRecord, SessionRecord, Store, open_store
from sessionstate.store.records import COMPLETED, RUNNING, UpstreamLink
from tests.store.sessions import A, B  # the store fixture (conftest.py) creates them

# -- session metadata -----------------------------------------------------------------------


def test_a_metadata_row_reads_back_every_field_it_was_inserted_with(store):
    """Every column of an inserted metadata row comes back in its own field, the spawn depth
    as the number written and the sandbox flag as a boolean, by session and by session id."""
    record = MetaRecord(A, "a", "sid-7", "slack", "model-x", "model-y", "high", "subagent", True, 2,
                        5, 6, "last-channel", "last-to", 8.5, 9.5)
    with store.transaction():
        store.meta.insert(record)
    assert store.meta.get(A, "a") == record
    assert store.meta.by_session_id("sid-7") == record
    assert store.meta.all() == {(A, "a"): record}


def test_an_unknown_session_id_has_no_metadata_row(store):
    """Looking a session up by an id no row holds answers ``None``, as ``get`` does for a
    session without a row."""
    with store.transaction():
        store.meta.insert(MetaRecord(A, "a", "sid-1", last_activity_at=1.0))
    assert store.meta.by_session_id("sid-unknown") is None
    assert store.meta.get(B, "a") is None


def test_a_refused_metadata_update_names_the_fields_it_cannot_write(store):
    """An update of a column that is never updated after the insert is refused with the
    offending names, sorted, and writes nothing."""
    with store.transaction():
        store.meta.insert(MetaRecord(A, "a", "sid-1", last_activity_at=1.0))
    with pytest.raises(ValueError, match=r"^not updatable: \['sandboxed', 'session_id'\]$"):
        store.meta.update(A, "a", session_id="other", sandboxed=True, model="m")
    assert store.meta.get(A, "a") == MetaRecord(A, "a", "sid-1", last_activity_at=1.0)


# -- child runs -----------------------------------------------------------------------------


def _threaded_run() -> RunRecord:
    return RunRecord("run-9", A, "a", B, "a", "subagent", "the task", "a label", "model-x", "high", True,
                     "shared", 30.0, RUNNING, None, None, "slack", "chan-1", 0, 4.0, None)


def test_a_run_reads_back_every_field_it_was_inserted_with(store):
    """Every column of a run comes back in its own field; a threaded run reads back as
    threaded, and its context as the text written."""
    run = _threaded_run()
    with store.transaction():
        store.runs.insert(run)
    assert store.runs.get("run-9") == run
    assert store.runs.by_child(B, "a") == [run]
    assert store.runs.by_requester(A, "a", 5) == [run]
    assert store.runs.active_by_requester(A, "a") == [run]
    assert store.runs.active() == [run]


def test_a_finished_threaded_run_keeps_its_thread_flag_and_its_end(store):
    """The terminal write changes the status, outcome, result and end time, and nothing else."""
    run = _threaded_run()
    with store.transaction():
        store.runs.insert(run)
        assert store.runs.finish("run-9", COMPLETED, None, "all done", 12.0)
    assert store.runs.get("run-9") == run._replace(status=COMPLETED, result_text="all done", ended_at=12.0)
    assert store.runs.active() == []


def test_a_run_id_taken_already_is_refused_as_a_storage_error(store):
    """A second run under an existing id is the database's refusal, raised as a
    ``StorageError`` (not the driver's own error), and the first run stays as it was."""
    run = _threaded_run()
    with store.transaction():
        store.runs.insert(run)
    with pytest.raises(StorageError):
        with store.transaction():
            store.runs.insert(run._replace(task="another task"))
    assert store.runs.get("run-9") == run


# -- transcripts ----------------------------------------------------------------------------


def test_a_message_reads_back_every_field_it_was_appended_with(store):
    """Every column of a message comes back in its own field: the JSON parts (objects, lists
    of several items, a scalar result) as the values written, the token counts as written."""
    provenance = {"source": "relay", "hops": [1, 2]}
    tool_calls = [{"name": "lookup", "args": {"q": "x", "n": 2}}, {"name": "reply"}]
    tool_result = {"ok": True, "rows": [3, 4]}
    with store.transaction():
        message_id = store.transcripts.append(
            A, "a", "assistant", "hello there", actor_type="agent", actor_id=B, provenance=provenance,
            tool_calls=tool_calls, tool_result=tool_result, input_tokens=7, output_tokens=11, created_at=3.5,
        )
    expected = MessageRecord(message_id, A, "a", "assistant", "hello there", "agent", B, provenance, tool_calls,
                             tool_result, 7, 11, 3.5)
    assert store.transcripts.recent(A, "a", 10) == [expected]


def test_a_message_without_structured_parts_reads_them_back_as_none(store):
    """A message appended with no provenance, tool calls or result reads them back as ``None``,
    while a scalar tool result reads back as that scalar."""
    with store.transaction():
        plain = store.transcripts.append(A, "a", "user", "hi", actor_type="human", actor_id=None, provenance=None,
                                         tool_calls=None, tool_result=None, input_tokens=0, output_tokens=0,
                                         created_at=1.0)
        scalar = store.transcripts.append(A, "a", "tool", "ran", actor_type="system", actor_id=None,
                                          provenance=None, tool_calls=None, tool_result="done", input_tokens=0,
                                          output_tokens=0, created_at=2.0)
    assert store.transcripts.recent(A, "a", 10) == [
        MessageRecord(plain, A, "a", "user", "hi", "human", None, None, None, None, 0, 0, 1.0),
        MessageRecord(scalar, A, "a", "tool", "ran", "system", None, None, None, "done", 0, 0, 2.0),
    ]


def test_the_first_text_of_a_role_never_written_is_none(store):
    """``first_text`` of a role the session has no message in, or of a session with no
    messages at all, answers ``None``."""
    with store.transaction():
        store.transcripts.append(A, "a", "user", "hi", actor_type="human", actor_id=None, provenance=None,
                                 tool_calls=None, tool_result=None, input_tokens=0, output_tokens=0, created_at=1.0)
    assert store.transcripts.first_text(A, "a", "user") == "hi"
    assert store.transcripts.first_text(A, "a", "assistant") is None
    assert store.transcripts.first_text(B, "a", "user") is None


# -- upstream links -------------------------------------------------------------------------


def _replace(store: Store, key: str, thread: str, *, marker: str | None, primed: bool, now: float) -> int:
    return store.links.replace(key, "a", provider="claude-jsonl", host="host-1", thread_id=thread, marker=marker,
                               primed=primed, now=now)


def test_a_link_created_primed_reads_back_checked_and_found(store):
    """A link created primed reads back with its marker, checked at its creation time and
    found, the same by session, by thread and in the list of all links."""
    generation = _replace(store, A, "thread-1", marker="m0", primed=True, now=5.0)
    expected = UpstreamLink(generation, A, "a", "claude-jsonl", "host-1", "thread-1", "m0", True, 0, 0, 5.0,
                            "found", 5.0)
    assert store.links.get(A, "a") == expected
    assert store.links.by_thread("claude-jsonl", "thread-1") == expected
    assert store.links.all() == [expected]


def test_a_link_created_unprimed_reads_back_unchecked_without_a_marker(store):
    """A link created unprimed and without a marker reads back with no marker, never
    checked and no status: ``None``, not the text "None"."""
    generation = _replace(store, B, "thread-2", marker=None, primed=False, now=6.0)
    assert store.links.get(B, "a") == UpstreamLink(generation, B, "a", "claude-jsonl", "host-1", "thread-2", None,
                                                   False, 0, 0, None, None, 6.0)


def test_a_thread_or_session_without_a_link_reads_as_none(store):
    """No link for the thread (or the session) asked about answers ``None``."""
    _replace(store, A, "thread-1", marker=None, primed=False, now=1.0)
    assert store.links.by_thread("claude-jsonl", "thread-other") is None
    assert store.links.by_thread("other-provider", "thread-1") is None
    assert store.links.get(B, "a") is None


def test_each_compare_and_set_write_says_it_wrote_and_what_it_changed(store):
    """advance (primed by default), miss, note_error and drop on the current link each answer
    ``True`` and move the version by one: a miss counts, an error leaves the marker and the
    miss count alone, an advance resets the count; a write from a stale version answers
    ``False`` and changes nothing."""
    generation = _replace(store, A, "thread-1", marker=None, primed=False, now=6.0)
    with store.transaction():
        assert store.links.advance(store.links.get(A, "a"), "m1", 7.0) is True
    advanced = store.links.get(A, "a")
    assert advanced == UpstreamLink(generation, A, "a", "claude-jsonl", "host-1", "thread-1", "m1", True, 0, 1, 7.0,
                                    "found", 6.0)
    with store.transaction():
        assert store.links.miss(advanced, 8.0) is True
    missed = store.links.get(A, "a")
    assert missed == advanced._replace(consecutive_misses=1, version=2, last_checked_at=8.0, last_status="missing")
    with store.transaction():
        assert store.links.note_error(missed, 9.0) is True
        assert store.links.note_error(missed, 10.0) is False  # the version moved
    errored = store.links.get(A, "a")
    assert errored == missed._replace(version=3, last_checked_at=9.0, last_status="error")
    with store.transaction():
        assert store.links.advance(errored, "m2", 11.0, primed=False) is True
    assert store.links.get(A, "a") == errored._replace(marker="m2", primed=False, consecutive_misses=0, version=4,
                                                       last_checked_at=11.0, last_status="found")
    with store.transaction():
        assert store.links.drop(errored) is False  # stale
        assert store.links.drop(store.links.get(A, "a")) is True
    assert store.links.get(A, "a") is None
    assert store.links.all() == []


# -- a database that refuses writes -----------------------------------------------------------


def _read_only(url: str) -> str:
    """The same database opened so that nothing can be written: SQLite's read-only mode, or
    PostgreSQL transactions that default to read-only (as on a standby)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return f"sqlite:///file:{parsed.database}?mode=ro&uri=true"
    options = f"{parsed.query['options']} -cdefault_transaction_read_only=on"
    return parsed.update_query_dict({"options": options}).render_as_string(hide_password=False)


def _refused(store: Store, write: Callable[[], object]) -> bool:
    """Whether ``write``, in a transaction of its own, raised ``StorageUnavailable`` (on every
    backend: SQLite's SQLITE_READONLY as PostgreSQL's read-only transaction; anything else it
    raises propagates)."""
    try:
        with store.transaction():
            write()
    except StorageUnavailable:
        return True
    return False


def test_every_feature_table_write_the_database_refuses_is_a_storage_error(backend):
    """On a database that refuses writes, each feature table's write raises
    ``StorageUnavailable`` (the store's translation, not the driver's error nor another one), and
    every row reads back as it was."""
    with backend.database() as url:
        writer = open_store(url, notifying_kinds=NOTIFYING_KINDS)
        with writer.transaction():
            writer.insert_session(SessionRecord(A, "a", "main", None, None, None, 1.0, 1.0))
            writer.meta.insert(MetaRecord(A, "a", "sid-1", last_activity_at=1.0))
            writer.runs.insert(_threaded_run())
            writer.transcripts.append(A, "a", "user", "hi", actor_type="human", actor_id=None, provenance=None,
                                      tool_calls=None, tool_result=None, input_tokens=0, output_tokens=0,
                                      created_at=1.0)
        _replace(writer, A, "thread-1", marker="m0", primed=True, now=1.0)
        writer.close()
        store = open_store(_read_only(url), notifying_kinds=NOTIFYING_KINDS)
        try:
            before = (store.meta.all(), store.runs.active(), store.transcripts.recent(A, "a", 5), store.links.all())
            link = store.links.get(A, "a")
            writes: dict[str, Callable[[], object]] = {
                "meta.update": lambda: store.meta.update(A, "a", model="m"),
                "meta.add_usage": lambda: store.meta.add_usage(A, "a", 1, 1),
                "runs.finish": lambda: store.runs.finish("run-9", COMPLETED, None, "done", 2.0),
                "runs.note_steered": lambda: store.runs.note_steered("run-9"),
                "transcripts.append": lambda: store.transcripts.append(
                    A, "a", "user", "again", actor_type="human", actor_id=None, provenance=None, tool_calls=None,
                    tool_result=None, input_tokens=0, output_tokens=0, created_at=2.0),
                "links.advance": lambda: store.links.advance(link, "m1", 2.0),
                "links.miss": lambda: store.links.miss(link, 2.0),
                "links.note_error": lambda: store.links.note_error(link, 2.0),
                "links.drop": lambda: store.links.drop(link),
            }
            assert [name for name, write in writes.items() if not _refused(store, write)] == []
            assert (store.meta.all(), store.runs.active(), store.transcripts.recent(A, "a", 5),
                    store.links.all()) == before
        finally:
            store.close()
