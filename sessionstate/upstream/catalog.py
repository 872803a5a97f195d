"""The session catalog: external sessions an operator could adopt.

Listing is read-only and never touches the gateway: a catalog entry that is not adopted stays
outside the mechanism (no session, no link, no checks, no events). A source lists one kind of
upstream (``ClaudeJsonlSource``: a directory of Claude Code transcripts; an embedder writes its
own ``CatalogSource`` for others); ``SessionCatalog`` merges them and isolates a failing source
(logged, reported in ``errors``) so one unmounted directory or unreachable host does not hide
the rest.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

log = logging.getLogger("sessionstate.upstream")

LOCAL_HOST = "local"


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One external session: ``provider`` is the monitor's key for the provider that reads it;
    ``agent_id``, when the source knows it, is the gateway agent the session belongs to (adoption
    takes it from here rather than guessing it from a session key)."""

    provider: str
    thread_id: str
    host: str = LOCAL_HOST
    title: str | None = None
    updated_at: float | None = None
    agent_id: str | None = None


class CatalogSource(Protocol):
    def entries(self) -> Sequence[CatalogEntry]:
        """Every session this source can see right now (may raise; the catalog isolates it)."""
        ...


class ClaudeJsonlSource:
    """``<root>/<project-slug>/<session-id>.jsonl`` files, newest first."""

    def __init__(self, root: str | os.PathLike[str], *, provider: str = "claude-jsonl", host: str | None = None) -> None:
        self.root = Path(root)
        self.provider = provider
        self.host = host or socket.gethostname() or LOCAL_HOST

    def entries(self) -> list[CatalogEntry]:
        found: list[CatalogEntry] = []
        for project in os.scandir(self.root):
            if not project.is_dir():
                continue
            for item in os.scandir(project.path):
                if item.name.endswith(".jsonl") and item.is_file():
                    found.append(CatalogEntry(
                        self.provider, item.name[: -len(".jsonl")], self.host,
                        title=project.name, updated_at=item.stat().st_mtime,
                    ))
        return sorted(found, key=lambda e: (-(e.updated_at or 0.0), e.thread_id))


@dataclass(slots=True)
class CatalogListing:
    entries: list[CatalogEntry] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class SessionCatalog:
    """Merges sources; ``find`` looks one entry up by provider and thread id."""

    def __init__(self, sources: Iterable[CatalogSource]) -> None:
        self.sources = list(sources)

    def list(self) -> CatalogListing:
        listing = CatalogListing()
        for source in self.sources:
            try:
                listing.entries.extend(source.entries())
            except Exception as exc:  # isolation: one broken source never hides the others
                log.warning("catalog source %r failed: %s", source, exc)
                listing.errors.append(f"{type(source).__name__}: {exc}")
        return listing

    def find(self, provider: str, thread_id: str) -> CatalogEntry | None:
        for entry in self.list().entries:
            if entry.provider == provider and entry.thread_id == thread_id:
                return entry
        return None
