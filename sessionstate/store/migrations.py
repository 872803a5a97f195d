"""Numbered schema migrations: how a database written by an older release reaches this schema.

A database's schema version (``schema.SCHEMA_VERSION`` for this release) is stamped by its
backend: ``PRAGMA user_version`` on SQLite (``bootstrap``), the one-row ``sessionstate_schema``
table on PostgreSQL (``postgres_schema``). ``MIGRATIONS`` holds one step per later version, in
order, for both backends: step ``n`` turns a version ``n - 1`` database into a version ``n``
one. A step gets a ``SchemaEditor`` and writes SQL both backends speak (``CREATE INDEX IF NOT
EXISTS ... WHERE``, ``DROP INDEX IF EXISTS``, ``ALTER TABLE ... ADD COLUMN``); a step that
cannot must branch on nothing but what the editor offers, or the backends get separate lists.
Opening runs the missing steps inside the same write transaction that checks the tables and
stamps the new version, and logs each one; a failing step rolls everything back and the
database is unchanged.

Version 2 added an index for the change pump and version 3 drops it again; version 4 adds
the cursors' provenance (spec R25); version 5 widens to 64 bits, on PostgreSQL only, the
integer columns older releases declared 32-bit there although the code lets them grow past
2**31 - 1 (``schema.WideInt``); version 6 rebuilds SQLite's change log without AUTOINCREMENT. A new file is created at the current
version directly from the SQLModel declarations; a step therefore only ever meets files
written by an older release. A step must tolerate a missing feature table (one whose module
was added later: it is created after the steps, from the current declarations).

Not a migration: incremental auto-vacuum. It is a property of the file, not of its tables,
and switching an existing file to it needs a full ``VACUUM`` (the whole file rewritten under
an exclusive lock, up to twice its size on disk). That is an operator's decision, offered as
``sessionstate vacuum``, not something an open should start on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence


class SchemaEditor(Protocol):
    """What a step may do to the database, inside the open's write transaction."""

    def execute(self, sql: str) -> Any:
        """Run one statement (no parameters)."""
        ...

    def has_table(self, name: str) -> bool: ...

    def has_column(self, table: str, column: str) -> bool: ...

    # Whether the backend's INTEGER column holds 64 bits (SQLite's does, PostgreSQL's holds 32).
    integer_holds_64_bits: bool

    def autoincrements(self, table: str) -> bool:
        """Whether ``table`` keeps SQLite's AUTOINCREMENT counter (never on PostgreSQL)."""
        ...


@dataclass(frozen=True)
class Migration:
    version: int  # the database's schema version after this step
    summary: str  # what the step changes, for the log line
    apply: Callable[[SchemaEditor], None]  # runs inside the open's write transaction


def _pending_notified_index(db: SchemaEditor) -> None:
    if not db.has_table("session_watch_cursors"):
        return  # created afterwards from the declarations
    db.execute(
        "CREATE INDEX IF NOT EXISTS ix_cursors_pending_notified ON session_watch_cursors"
        " (notified_sequence) WHERE notified_sequence > last_seen_sequence"
    )


def _drop_pending_notified_index(db: SchemaEditor) -> None:
    db.execute("DROP INDEX IF EXISTS ix_cursors_pending_notified")


def _cursor_provenance(db: SchemaEditor) -> None:
    if not db.has_table("session_watch_cursors") or db.has_column("session_watch_cursors", "provenance"):
        return  # created afterwards from the declarations (or already there)
    db.execute(
        "ALTER TABLE session_watch_cursors ADD COLUMN provenance VARCHAR NOT NULL DEFAULT 'explicit'"
    )
    # Older releases made a cursor either by a spawn edge or by an explicit watch; a target
    # whose parent is the watcher is the spawn edge's (an explicit watch of one's own child
    # cannot be told apart, and waking either way, it behaves the same).
    db.execute(
        "UPDATE session_watch_cursors SET provenance = 'spawn' WHERE EXISTS (SELECT 1 FROM sessions s"
        " WHERE s.session_key = session_watch_cursors.target_session_key"
        " AND s.agent_id = session_watch_cursors.target_agent_id"
        " AND s.parent_key = session_watch_cursors.watcher_session_key)"
    )


# The columns version 5 widens, by table: declared plain ``int`` (INTEGER, 32-bit on
# PostgreSQL) before it, ``schema.WideInt`` since. Token counts are taken up to 2**62 - 1 and
# summed per session; ids and per-row counters only ever grow.
WIDENED_IN_VERSION_5: dict[str, tuple[str, ...]] = {
    "session_messages": ("id", "input_tokens", "output_tokens"),
    "session_meta": ("input_tokens", "output_tokens"),
    "upstream_links": ("generation", "version"),
    "session_claims": ("generation",),
    "session_cursor_changes": ("stamp",),
    "agent_runs": ("steer_count",),
}


def _widen_integers(db: SchemaEditor) -> None:
    if db.integer_holds_64_bits:
        return  # SQLite: the same columns already hold 64 bits; nothing to rewrite
    for table, columns in WIDENED_IN_VERSION_5.items():
        present = [c for c in columns if db.has_table(table) and db.has_column(table, c)]
        if not present:
            continue  # created afterwards from the declarations
        # One statement per table: PostgreSQL rewrites the table once for all its columns.
        db.execute(f"ALTER TABLE {table} " + ", ".join(f"ALTER COLUMN {c} TYPE BIGINT" for c in present))
        for column in present:
            # An id's SERIAL sequence has a type of its own, which caps the ids it hands out.
            sequence = db.execute(f"SELECT pg_get_serial_sequence('{table}', '{column}')").fetchone()[0]
            if sequence is not None:
                db.execute(f"ALTER SEQUENCE {sequence} AS BIGINT")


# The change log as version 6 declares it (serving.CursorChangeRow), frozen here: a later
# declaration must not change what this step builds.
CURSOR_CHANGES_V6 = (
    "CREATE TABLE session_cursor_changes (\n\tstamp INTEGER NOT NULL, \n\twatcher_session_key VARCHAR NOT NULL,"
    " \n\trecorded_at FLOAT NOT NULL, \n\tPRIMARY KEY (stamp)\n)"
)


def _plain_change_stamps(db: SchemaEditor) -> None:
    if not db.has_table("session_cursor_changes") or not db.autoincrements("session_cursor_changes"):
        return  # PostgreSQL, a table created afterwards, or one already rebuilt
    # SQLite cannot drop AUTOINCREMENT in place: the table is built anew and its rows copied,
    # stamps included, so a pump's watermark still reads them in order.
    db.execute("ALTER TABLE session_cursor_changes RENAME TO session_cursor_changes_v5")
    db.execute(CURSOR_CHANGES_V6)
    db.execute("INSERT INTO session_cursor_changes (stamp, watcher_session_key, recorded_at)"
               " SELECT stamp, watcher_session_key, recorded_at FROM session_cursor_changes_v5")
    db.execute("DROP TABLE session_cursor_changes_v5")


MIGRATIONS: tuple[Migration, ...] = (
    Migration(2, "index pending cursors by notified_sequence (the change pump, spec R22)", _pending_notified_index),
    # Maintaining that index on every freeze cost 5-8 % of an append with three watchers; the
    # pump finds frozen cursors through the log's new events and the target index instead.
    Migration(3, "drop ix_cursors_pending_notified (the change pump reads the log instead)", _drop_pending_notified_index),
    Migration(4, "cursor provenance: spawn / explicit / ambient (spec R25)", _cursor_provenance),
    Migration(5, "64-bit ids, token counts and counters on PostgreSQL (no change on SQLite)", _widen_integers),
    # Its sqlite_sequence row was one more WAL page in every drain's commit.
    Migration(6, "change-log stamps without SQLite's AUTOINCREMENT (no change on PostgreSQL)", _plain_change_stamps),
)


def steps_between(
    file_version: int, target_version: int, migrations: Sequence[Migration]
) -> list[Migration]:
    """The steps that take a ``file_version`` file to ``target_version``, in order.

    Raises ``ValueError`` when the list has a gap or is out of order (a defect of this module,
    caught by its tests, never a property of a user's file).
    """
    versions = [m.version for m in migrations]
    if versions != list(range(2, 2 + len(versions))):
        raise ValueError(f"migration versions must be 2, 3, ... in order; got {versions}")
    if target_version != 1 + len(versions):
        raise ValueError(
            f"schema version {target_version} needs migrations up to it; the last is {1 + len(versions)}"
        )
    return [m for m in migrations if file_version < m.version <= target_version]
