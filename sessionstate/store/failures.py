"""Driver and file-system failures, translated into the package's storage errors.

The store layer (``sessionstate/store/``) is where the drivers (``sqlite3``, ``psycopg``,
SQLAlchemy) and ``OSError`` are seen; this module translates SQLite's and the file system's:
every public store method, every transaction (``SqlStore.transaction``, ``sql_store.py``) and
the open itself turn them into a ``StorageError`` subclass whose message names the database
and the cause (PostgreSQL's failures are translated in ``postgres_errors.py``). Callers above the
store (the gateway's best-effort recording, the tools, the CLI) only ever see those.
"""

from __future__ import annotations

import functools
import sqlite3
from typing import Any, Callable, TypeVar

from sqlalchemy.exc import SQLAlchemyError

from ..errors import StorageBusy, StorageError, StorageFull, StorageUnavailable

# What the store catches. Anything else (a bug, a TypeError) is not a storage failure.
DRIVER_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, SQLAlchemyError, OSError)

_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_FULL = 5, 6, 13

_T = TypeVar("_T")


def storage_error(exc: BaseException, where: str) -> StorageError:
    """The ``StorageError`` for a driver or file-system failure on the database ``where``."""
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        name = getattr(exc, "sqlite_errorname", None)
        cause = f"{exc} ({name})" if name else str(exc)
        primary = code & 0xFF if isinstance(code, int) else None
        if primary == _SQLITE_FULL:
            return StorageFull(f"{where}: storage full: {cause}")
        if primary in (_SQLITE_BUSY, _SQLITE_LOCKED):
            return StorageBusy(f"{where}: storage busy: {cause}")
        if isinstance(exc, (sqlite3.IntegrityError, sqlite3.InterfaceError)):
            return StorageError(f"{where}: {cause}")
        return StorageUnavailable(f"{where}: {cause}")
    if isinstance(exc, OSError):
        cause = exc.strerror or str(exc)
        if exc.filename is not None and str(exc.filename) != where:
            cause = f"{cause}: {exc.filename}"
        return StorageUnavailable(f"{where}: {cause}")
    return StorageUnavailable(f"{where}: {type(exc).__name__}: {exc}")


def translated(cls: type[_T]) -> type[_T]:
    """Class decorator: every public method of ``cls`` raises ``StorageError`` instead of a
    driver error.

    The instance translates through its own ``storage_error`` (a ``SqliteStore``, or a
    feature table given the store's); inherited methods are translated as well. Methods named in ``cls.HOT_PATH`` are left bare:
    they run only inside ``transaction()``, which translates for them at no cost per call.
    """
    hot = set(getattr(cls, "HOT_PATH", ()))
    methods: dict[str, Any] = {}
    for klass in reversed(cls.__mro__[:-1]):  # a shared base's methods too, the subclass's last
        methods.update(vars(klass))
    for name, value in methods.items():
        if name.startswith("_") or name in hot or not callable(value) or isinstance(value, (staticmethod, classmethod, type)):
            continue
        setattr(cls, name, _translating(value))
    return cls


def _translating(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except DRIVER_ERRORS as exc:
            raise self.storage_error(exc) from exc

    return wrapper
