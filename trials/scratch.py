"""A fresh, empty database for one trial, on the backend the user named.

``./dev trials --db URL`` runs its trials against that database's backend without
touching its data: a PostgreSQL URL gets a new schema in that database for each trial
(reached through the URL's ``search_path``) that is dropped afterwards; a SQLite URL or path
gets a new file in a temporary directory next to it; nothing (the default) a temporary file.
"""

from __future__ import annotations

import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sessionstate.shared.config import normalize_url
from sessionstate.store.factory import is_postgres_url
from sessionstate.store.sqlite import sqlite_path


@contextmanager
def scratch_database(base: str | None, directory: Path | None = None) -> Iterator[str]:
    if base is not None and is_postgres_url(normalize_url(base)):
        with _postgres_schema(normalize_url(base)) as url:
            yield url
        return
    if base is not None:
        path = sqlite_path(normalize_url(base))
        directory = path.parent if path is not None else directory
    with tempfile.TemporaryDirectory(prefix="sessionstate-trial-", dir=directory) as tmp:
        yield f"sqlite:///{Path(tmp) / 'state.db'}"


@contextmanager
def _postgres_schema(base: str) -> Iterator[str]:
    from sessionstate.store.postgres import postgres_url

    schema = f"sessionstate_trial_{uuid.uuid4().hex[:12]}"
    _admin(base, f"CREATE SCHEMA {schema}")
    try:
        yield postgres_url(base).update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
            hide_password=False)
    finally:
        _admin(base, f"DROP SCHEMA {schema} CASCADE")


def _admin(base: str, statement: str) -> None:
    """One statement on a short-lived autocommit connection of the store's own kind."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from sessionstate.store.postgres import postgres_url

    engine = create_engine(postgres_url(base), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(statement)
    finally:
        engine.dispose()


def describe(base: str | None) -> str:
    if base is None:
        return "temporary SQLite files"
    url = normalize_url(base)
    if is_postgres_url(url):
        from sessionstate.store.postgres import postgres_url

        return f"fresh schemas in {postgres_url(url).render_as_string(hide_password=True)}"
    return f"temporary SQLite files beside {url}"

