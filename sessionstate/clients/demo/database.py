"""Where ``sessionstate demo`` runs: a new temporary database unless told otherwise, never real
state by accident. A database that already holds sessions is refused unless ``--reuse`` says to
run on it anyway (the demo then deletes and recreates its own sessions there)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ...shared.config import normalize_url
from ...errors import InvalidArgument


def demo_url(db: str | None) -> str:
    """The URL the demo runs on: ``db`` when given, else a file in a new temporary directory
    (left behind so the story can be looked at afterwards; the demo prints its path)."""
    if db is not None:
        return normalize_url(db)
    directory = Path(tempfile.mkdtemp(prefix="sessionstate-demo-"))
    return f"sqlite:///{directory / 'state.db'}"


def refuse_non_empty(session_keys: list[str], url: str, *, reuse: bool) -> None:
    """Raise unless the database holds no session or ``reuse`` allows running on it."""
    if session_keys and not reuse:
        shown = ", ".join(sorted(session_keys)[:3]) + (", ..." if len(session_keys) > 3 else "")
        raise InvalidArgument(
            f"{url} already holds {len(session_keys)} session(s) ({shown}); the demo runs on a new"
            " database unless told --reuse"
        )
