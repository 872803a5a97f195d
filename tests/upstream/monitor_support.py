"""A small world for monitor tests: a real Gateway on a SQLite file, a Claude transcript root,
a fake paired node, and providers that can be scripted, broken or made to race."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from sessionstate import Gateway
from sessionstate.upstream.adoption import Adopter
from sessionstate.upstream.catalog import CatalogEntry
from sessionstate.upstream.monitor import UpstreamMonitor
from sessionstate.upstream.providers import CheckResult, ClaudeJsonlProvider, PairedNodeProvider, UpstreamProvider
from tests.upstream.fake_node import InMemoryNodeClient

from tests.upstream.jsonl_fixtures import TranscriptBuilder, append_bytes, encode

MANAGER = "agent:main:main"
# R27's announcement (on by default) of each session created for MANAGER's agent, adopted ones
# included: it says a session exists, not that it changed, so it is not one of the notices.
ANNOUNCEMENT_PREFIX = "[session created] "


class Hooked(UpstreamProvider):
    """Wraps a provider: ``before`` runs inside every check (to race it), ``broken`` makes it
    raise, ``error`` makes it answer ``error``."""

    name: ClassVar[str] = "hooked"

    def __init__(self, inner: UpstreamProvider) -> None:
        self.inner = inner
        self.before: Callable[[], None] | None = None
        self.broken = False
        self.error = False
        self.calls = 0

    def check(self, thread_id: str, marker: str | None) -> CheckResult:
        self.calls += 1
        if self.broken:
            raise RuntimeError("provider exploded")
        if self.error:
            return CheckResult.error(marker, "injected error")
        result = self.inner.check(thread_id, marker)
        if self.before is not None:
            hook, self.before = self.before, None
            hook()
        return result


@dataclass
class World:
    tmp: Path
    gw: Gateway
    root: Path
    node: InMemoryNodeClient
    jsonl: Hooked
    paired: Hooked
    echoes: list[str] = field(default_factory=list)
    builders: dict[str, TranscriptBuilder] = field(default_factory=dict)

    @property
    def providers(self) -> dict[str, UpstreamProvider]:
        return {"claude-jsonl": self.jsonl, "paired-node": self.paired}

    def adopter(self) -> Adopter:
        return Adopter(self.gw, self.providers)

    def monitor(self, **kwargs: Any) -> UpstreamMonitor:
        kwargs.setdefault("recent_user_messages", lambda key: list(self.echoes))
        return UpstreamMonitor(self.gw, self.providers, **kwargs)

    def transcript(self, thread: str, *lines: dict[str, Any]) -> Path:
        builder = self.builders.setdefault(thread, TranscriptBuilder(thread))
        path = builder.path_under(self.root)
        path.touch()
        self.write(thread, *lines)
        return path

    def builder(self, thread: str) -> TranscriptBuilder:
        return self.builders.setdefault(thread, TranscriptBuilder(thread))

    def write(self, thread: str, *lines: dict[str, Any]) -> None:
        path = self.builder(thread).path_under(self.root)
        append_bytes(path, b"".join(encode(line) for line in lines))

    def human(self, thread: str, text: str) -> str:
        line = self.builder(thread).user_prompt(text)
        self.write(thread, line)
        return str(line["uuid"])

    def adopt_jsonl(self, thread: str, watcher: str | None = MANAGER, **kwargs: Any) -> str:
        entry = CatalogEntry("claude-jsonl", thread)
        return self.adopter().adopt(entry, watcher=watcher, **kwargs).session_key

    def notices(self, watcher: str = MANAGER) -> list[str]:
        """The watcher's queued notices: its queue without R27's announcements."""
        return [line for line in self.gw.pending_system_events(watcher) if not line.startswith(ANNOUNCEMENT_PREFIX)]

    def events(self, key: str, kind: str | None = None) -> list[dict[str, Any]]:
        events = self.gw.session_status(key, changes_since=0)["stateChanges"]["events"]
        return [e for e in events if kind is None or e["kind"] == kind]

    def dedupe_keys(self, key: str, kind: str = "human_direct_message") -> list[str]:
        rows = self.gw.store.events_after(key, "main", 0, 10_000)
        return [r.dedupe_key or "" for r in rows if r.kind == kind]


    def human_activities(self, key: str) -> dict[str, tuple[int, bool]]:
        """Recorded human activity: dedupe key -> (payload turns, payload burstOverflow)."""
        activities: dict[str, tuple[int, bool]] = {}
        for row in self.gw.store.events_after(key, "main", 0, 10_000):
            if row.kind == "human_direct_message":
                payload = json.loads(row.payload) if isinstance(row.payload, str) else row.payload
                activities[row.dedupe_key or ""] = (payload["turns"], payload["burstOverflow"])
        return activities


def make_world(tmp: Path, url: str | None = None) -> World:
    gw = Gateway.open(url or f"sqlite:///{tmp / 'state.db'}")
    gw.create_session(MANAGER)
    root = tmp / "projects"
    root.mkdir()
    node = InMemoryNodeClient()
    return World(tmp, gw, root, node, Hooked(ClaudeJsonlProvider(root)), Hooked(PairedNodeProvider(node)))
