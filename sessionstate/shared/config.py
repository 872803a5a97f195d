"""Where the embedded default database lives."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InvalidDatabaseUrl

ENV_DB = "SESSIONSTATE_DB"


def default_db_path() -> Path:
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "sessionstate" / "state.db"


def default_url() -> str:
    """``$SESSIONSTATE_DB`` (a URL or a file path), else the per-user state file."""
    configured = os.environ.get(ENV_DB)
    if configured:
        return normalize_url(configured)
    return f"sqlite:///{default_db_path()}"


def normalize_url(url: str | os.PathLike[str] | None) -> str:
    """A database URL from a URL, a file path or ``None`` (the default database).

    An empty string is refused rather than taken as the current directory.
    """
    if url is None:
        return default_url()
    try:
        text = os.fspath(url)
    except TypeError:
        raise InvalidDatabaseUrl(f"a database URL or path must be a string, not {type(url).__name__}") from None
    if not isinstance(text, str):
        raise InvalidDatabaseUrl(f"a database URL or path must be a string, not {type(text).__name__}")
    if not text.strip():
        raise InvalidDatabaseUrl("the database URL is empty; give a sqlite:/// URL or a file path")
    if "\x00" in text or any("\ud800" <= c <= "\udfff" for c in text):
        raise InvalidDatabaseUrl(f"{text!r} holds a NUL or a lone surrogate: no file can have that name")
    if "://" in text:
        return text
    try:
        return f"sqlite:///{Path(text).resolve()}"
    except (OSError, ValueError) as exc:  # an embedded NUL, a symlink loop
        raise InvalidDatabaseUrl(f"{text!r} is not a usable file path ({exc})") from None
