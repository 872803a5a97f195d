"""SQL run beside a store, on a second connection to its database (either backend): for tests
that build a database as an older release left it, or set a value no store write sets."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from sessionstate.store.postgres import postgres_url


def run_beside(url: str, *statements: str) -> list[tuple[Any, ...]]:
    """Run ``statements`` in one committed transaction; returns the last one's rows."""
    rows: list[tuple[Any, ...]] = []
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)) as db:
            db.execute("BEGIN IMMEDIATE")
            for statement in statements:
                rows = db.execute(statement).fetchall()
            db.execute("COMMIT")
        return rows
    engine = create_engine(postgres_url(url), poolclass=NullPool)
    try:
        with engine.begin() as conn:
            for statement in statements:
                result = conn.exec_driver_sql(statement)
                rows = [tuple(row) for row in result] if result.returns_rows else []
    finally:
        engine.dispose()
    return rows
