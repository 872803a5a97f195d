"""Picks the store for a database URL by its scheme.

``sqlite:///…`` is the embedded default; ``postgresql+psycopg://…`` (also ``postgresql://`` and
``postgres://``) opens ``PostgresStore``, which needs the optional extra
``sessionstate[postgres]``. psycopg is imported only when such a URL is opened.
"""

from __future__ import annotations

from typing import Iterable, cast

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from ..errors import UnsupportedBackend
from .sqlite import DEFAULT_SYNCHRONOUS, SqliteStore

POSTGRES_BACKENDS = ("postgresql", "postgres")


def backend_name(url: str) -> str:
    """``sqlite`` or ``postgresql`` for a URL this package opens; ``UnsupportedBackend`` else."""
    try:
        name = make_url(url).get_backend_name()
    except ArgumentError as exc:
        raise UnsupportedBackend(f"not a database URL: {url!r} ({exc})") from None
    if name == "sqlite":
        return "sqlite"
    if name in POSTGRES_BACKENDS:
        return "postgresql"
    raise UnsupportedBackend(
        f"backend {name!r} is not supported; use sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"
    )


def open_store(url: str, *, notifying_kinds: Iterable[str], synchronous: str = DEFAULT_SYNCHRONOUS) -> SqliteStore:
    """The store for ``url``. PostgresStore offers SqliteStore's methods and contract; it is
    typed as SqliteStore here, the interface both implement."""
    if backend_name(url) == "sqlite":
        return SqliteStore(url, notifying_kinds=notifying_kinds, synchronous=synchronous)
    try:
        from .postgres import PostgresStore
    except ImportError as exc:
        raise UnsupportedBackend(
            f"PostgreSQL URLs need psycopg 3: pip install 'sessionstate[postgres]' ({exc})"
        ) from None
    return cast(SqliteStore, PostgresStore(url, notifying_kinds=notifying_kinds, synchronous=synchronous))
