"""The integer columns the code lets grow past 2**31 - 1 (``schema.WideInt``: 32-bit INTEGER on
PostgreSQL before schema version 5) take and give back the largest value each can reach, on
both backends: a message's token counts up to the service's bound and a session's sums of
them, the AUTOINCREMENT ids of messages and links, and the per-row counters (a link's version,
a claim's generation, a run's steers) up to the largest 64-bit integer.

An id or counter gets there through the store's own write, from one below the top: the step
below is set beside the store (its counter or row), as nothing in the store's contract writes
one directly. The change log's stamp is left out: only SQLite writes that table, and there
every INTEGER already holds 64 bits. Last, a new PostgreSQL database keeps 32-bit columns only
for the values the code bounds."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from sessionstate import Gateway
from sessionstate.shared.validation import MAX_COUNT
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import MetaRecord, SessionRecord, Store, open_store
from sessionstate.store.records import RUNNING, RunRecord
from tests.backends import Backend
from tests.store.second_connection import run_beside
from tests.store.sessions import A, B

LARGEST_64_BIT = 2**63 - 1
# What append_message takes per message: the session's two sums must still fit (MAX_COUNT).
LARGEST_TOKEN_COUNT = MAX_COUNT // 2
assert LARGEST_TOKEN_COUNT > 2**31 - 1 and 2 * LARGEST_TOKEN_COUNT <= LARGEST_64_BIT


@dataclass
class Opened:
    store: Store
    url: str


@pytest.fixture
def opened(backend: Backend) -> Iterator[Opened]:
    with backend.database() as url:
        store = open_store(url, notifying_kinds=NOTIFYING_KINDS)
        with store.transaction():
            for key in (A, B):
                store.insert_session(SessionRecord(key, "a", "main", None, None, None, 1.0, 1.0))
        yield Opened(store, url)
        store.close()


def next_id_is_the_largest(url: str, table: str, column: str) -> None:
    """Move ``table``'s AUTOINCREMENT counter so that its next id is the largest 64-bit one."""
    below = LARGEST_64_BIT - 1
    if url.startswith("sqlite"):
        run_beside(url, f"DELETE FROM sqlite_sequence WHERE name = '{table}'",
                   f"INSERT INTO sqlite_sequence (name, seq) VALUES ('{table}', {below})")
    else:
        run_beside(url, f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), {below})")


def append_message(store: Store, *, tokens: int = 0) -> int:
    with store.transaction():
        return store.transcripts.append(
            A, "a", "assistant", "counted", actor_type="agent", actor_id=None, provenance=None,
            tool_calls=None, tool_result=None, input_tokens=tokens, output_tokens=tokens, created_at=1.0,
        )


def link(store: Store) -> None:
    store.links.replace(A, "a", provider="p", host="h", thread_id="t", marker=None, primed=True, now=1.0)


def test_a_message_keeps_the_largest_token_counts_the_service_takes(opened):
    append_message(opened.store, tokens=LARGEST_TOKEN_COUNT)
    [message] = opened.store.transcripts.recent(A, "a", 10)
    assert (message.input_tokens, message.output_tokens) == (LARGEST_TOKEN_COUNT, LARGEST_TOKEN_COUNT)


def test_a_sessions_usage_sums_two_of_the_largest_counts(opened):
    store = opened.store
    with store.transaction():
        store.meta.insert(MetaRecord(A, "a", "sid-1", last_activity_at=1.0))
        store.meta.add_usage(A, "a", LARGEST_TOKEN_COUNT, LARGEST_TOKEN_COUNT)
        store.meta.add_usage(A, "a", LARGEST_TOKEN_COUNT, 1)
    meta = store.meta.get(A, "a")
    assert (meta.input_tokens, meta.output_tokens) == (2 * LARGEST_TOKEN_COUNT, LARGEST_TOKEN_COUNT + 1)


def test_message_ids_reach_the_largest_64_bit_integer(opened):
    append_message(opened.store)  # SQLite's counter row exists from the first id on
    next_id_is_the_largest(opened.url, "session_messages", "id")
    assert append_message(opened.store) == LARGEST_64_BIT
    assert [m.id for m in opened.store.transcripts.recent(A, "a", 10)][-1] == LARGEST_64_BIT


def test_link_generations_reach_the_largest_64_bit_integer(opened):
    store = opened.store
    link(store)
    next_id_is_the_largest(opened.url, "upstream_links", "generation")
    link(store)  # a Continue: the link is replaced under a new generation
    assert store.links.get(A, "a").generation == LARGEST_64_BIT


def test_a_links_version_counts_up_to_the_largest_64_bit_integer(opened):
    store = opened.store
    link(store)
    run_beside(opened.url, f"UPDATE upstream_links SET version = {LARGEST_64_BIT - 1}")
    with store.transaction():
        assert store.links.advance(store.links.get(A, "a"), "m2", 2.0) is True
    assert (store.links.get(A, "a").version, store.links.get(A, "a").marker) == (LARGEST_64_BIT, "m2")


def test_a_claims_generation_counts_up_to_the_largest_64_bit_integer(opened):
    store = opened.store
    with store.transaction():
        store.serving.claim(A, "server-1", 1.0)
    run_beside(opened.url, f"UPDATE session_claims SET generation = {LARGEST_64_BIT - 1}")
    with store.transaction():
        assert store.serving.claim(A, "server-2", 2.0) == LARGEST_64_BIT
    assert store.serving.claimant(A) == ("server-2", LARGEST_64_BIT)


def test_a_runs_steer_count_counts_up_to_the_largest_64_bit_integer(opened):
    store = opened.store
    run = RunRecord("r1", A, "a", B, "a", "subagent", "task", None, None, None, False, "isolated",
                    None, RUNNING, None, None, None, None, LARGEST_64_BIT - 1, 1.0, None)
    with store.transaction():
        store.runs.insert(run)
        assert store.runs.note_steered("r1") is True
    assert store.runs.get("r1").steer_count == LARGEST_64_BIT


def test_a_new_postgresql_databases_only_32_bit_columns_are_the_ones_the_code_bounds(pg_url):
    """A new plain ``int`` field fails here until someone decides its values stay below 2**31."""
    Gateway.open(pg_url).close()
    narrow = run_beside(pg_url, (
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND data_type IN ('integer', 'smallint') ORDER BY table_name, column_name"
    ))
    assert narrow == [
        ("session_meta", "spawn_depth"),  # one per level of nesting
        ("session_servers", "pid"),  # an OS process id
        ("sessionstate_schema", "version"),  # this release's number
        ("upstream_links", "consecutive_misses"),  # dropped at 3
    ]
