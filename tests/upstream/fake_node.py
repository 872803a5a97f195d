"""An in-memory paired node, for tests and demos of ``PairedNodeProvider``."""

from __future__ import annotations

import itertools
from typing import Any

from sessionstate.upstream.providers.paired_node import NodeUnavailable


class InMemoryNodeClient:
    """Holds transcripts in lists; can be switched offline to simulate failures."""

    def __init__(self) -> None:
        self.threads: dict[str, list[dict[str, Any]]] = {}
        self.available = True
        self.calls = 0
        self._ids = itertools.count(1)

    def add_item(
        self,
        thread_id: str,
        *,
        role: str,
        text: str,
        type: str = "text",
        timestamp: float | str | None = None,
        item_id: str | None = None,
    ) -> str:
        """Append an item to ``thread_id`` and return its id."""
        item_id = item_id or f"{thread_id}-item-{next(self._ids)}"
        self.threads.setdefault(thread_id, []).append(
            {"id": item_id, "role": role, "type": type, "text": text, "timestamp": timestamp}
        )
        return item_id

    def newest_items(self, thread_id: str, limit: int) -> list[dict[str, Any]]:
        self.calls += 1
        if not self.available:
            raise NodeUnavailable("fake node is offline")
        items = self.threads.get(thread_id, [])
        return [dict(item) for item in items[-limit:]] if limit > 0 else []
