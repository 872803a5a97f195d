"""Picks the store for a database URL by its scheme.

``postgresql+psycopg://…`` (also ``postgresql://`` and ``postgres://``) opens
``PostgresStore``, which needs the optional extra ``sessionstate[postgres]``; psycopg is
imported only when such a URL is opened. Every other URL goes to ``SqliteStore``, the
embedded default, which refuses what it cannot open with the typed errors it documents.
"""

from __future__ import annotations

from typing import Iterable, cast

from sqlalchemy.engine import make_url

from ..errors import UnsupportedBackend
from .sqlite import DEFAULT_SYNCHRONOUS, SqliteStore

POSTGRES_BACKENDS = ("postgresql", "postgres")


def is_postgres_url(url: object) -> bool:
    if not isinstance(url, str) or "://" not in url:
        return False
    try:
        return make_url(url).get_backend_name() in POSTGRES_BACKENDS
    except Exception:  # unparseable: SqliteStore says what is wrong with it
        return False


def open_store(
    url: str, *, notifying_kinds: Iterable[str], synchronous: str = DEFAULT_SYNCHRONOUS, create: bool = True
) -> SqliteStore:
    """The store for ``url``. PostgresStore offers SqliteStore's methods and contract; it is
    typed as SqliteStore here, the interface both implement."""
    if not is_postgres_url(url):
        return SqliteStore(url, notifying_kinds=notifying_kinds, synchronous=synchronous, create=create)
    try:
        from .postgres import PostgresStore
    except ImportError as exc:
        raise UnsupportedBackend(
            f"PostgreSQL URLs need psycopg 3: pip install 'sessionstate[postgres]' ({exc})"
        ) from None
    return cast(
        SqliteStore, PostgresStore(url, notifying_kinds=notifying_kinds, synchronous=synchronous, create=create)
    )
