"""Open a store from a database URL: the URL's scheme picks the backend.

A backend is one entry in ``BACKENDS``: the scheme (the part before ``:``, without a
``+driver`` suffix) and a function that opens it. Adding a backend is adding its module and
one entry here; nothing above the store changes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import InvalidDatabaseUrl, UnsupportedBackend
from .contract import Store
from .sqlite import SqliteStore


def _open_sqlite(url: str, notifying_kinds: Iterable[str], options: dict[str, Any]) -> Store:
    options.pop("decisions", None)  # decided in Python: an embedded database has no round trip to save
    return SqliteStore(url, notifying_kinds=notifying_kinds, **options)


def _open_postgres(url: str, notifying_kinds: Iterable[str], options: dict[str, Any]) -> Store:
    try:
        from .postgres import PostgresStore
    except ImportError as exc:  # psycopg is the optional extra
        raise UnsupportedBackend(
            f"PostgreSQL URLs need psycopg 3: pip install 'sessionstate[postgres]' ({exc})"
        ) from None
    return PostgresStore(url, notifying_kinds=notifying_kinds, **options)


BackendOpener = Callable[[str, Iterable[str], dict[str, Any]], Store]
BACKENDS: dict[str, BackendOpener] = {
    "sqlite": _open_sqlite,
    "postgresql": _open_postgres,
    "postgres": _open_postgres,
}


def is_postgres_url(url: object) -> bool:
    return isinstance(url, str) and url_scheme(url) in ("postgresql", "postgres")


def url_scheme(url: str) -> str:
    """``sqlite`` for ``sqlite:///x.db``, ``postgresql`` for ``postgresql+psycopg://...``."""
    scheme, separator, _ = url.partition(":")
    return scheme.split("+", 1)[0].lower() if separator else ""


def open_store(url: str, *, notifying_kinds: Iterable[str], **options: Any) -> Store:
    """The store for ``url``; ``options`` go to the backend (SQLite: ``synchronous``;
    ``decisions``, the table's as plain data, ``decision_sql.Decisions``: a server backend
    decides a lone record in SQL with them, SQLite ignores them)."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidDatabaseUrl("the database URL is empty; give a sqlite:/// URL or a file path")
    scheme = url_scheme(url)
    if not re.fullmatch(r"[a-z][a-z0-9.-]*", scheme):
        raise InvalidDatabaseUrl(f"{url!r} is not a database URL (no scheme); give a sqlite:/// URL or a file path")
    opener = BACKENDS.get(scheme)
    if opener is None:
        raise UnsupportedBackend(
            f"backend {scheme or url!r} is not supported; supported schemes: {sorted(BACKENDS)}"
            " (e.g. a sqlite:/// URL)"
        )
    return opener(url, notifying_kinds, options)
