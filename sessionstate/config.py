"""Where the embedded default database lives."""

from __future__ import annotations

import os
from pathlib import Path

ENV_DB = "SESSIONSTATE_DB"


def default_db_path() -> Path:
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "sessionstate" / "state.db"


def default_url() -> str:
    """``$SESSIONSTATE_DB`` (a URL or a file path), else the per-user state file."""
    configured = os.environ.get(ENV_DB)
    if configured:
        return configured if "://" in configured else f"sqlite:///{Path(configured).resolve()}"
    return f"sqlite:///{default_db_path()}"


def normalize_url(url: str | os.PathLike[str] | None) -> str:
    if url is None:
        return default_url()
    text = os.fspath(url)
    return text if "://" in text else f"sqlite:///{Path(text).resolve()}"
