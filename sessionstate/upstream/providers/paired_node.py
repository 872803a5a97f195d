"""Claude sessions living on a paired remote node.

The node answers one query: the newest ``WINDOW`` (50) transcript items of a
thread. Items are returned **oldest first** (transcript order), each a dict:

* ``id`` (str, required): stable, unique within the thread;
* ``role``: ``"user"``, ``"assistant"``, ``"system"``, ``"tool"``, ...;
* ``type`` (optional): ``"text"`` (default) for a plain message, or e.g.
  ``"tool_result"`` / ``"compaction"`` for items the tool injected;
* ``text`` (str), ``timestamp`` (epoch seconds or ISO 8601, optional).

The marker is the id of the newest item seen. Items after it are new. A
thread seen empty gets the marker ``EMPTY_THREAD`` (``""``, which no item id
can be), so "empty when last seen" stays distinct from "never seen" (``None``)
and a burst that fills the whole window on an adopted empty thread is flagged
like any other (a full window on a thread seen empty may hold exactly
``WINDOW`` new items and nothing lost; it is flagged all the same, because the
node's answer cannot tell that apart from more).

When a marker exists but is not among the returned items, more than
``WINDOW`` items arrived since the last check (a burst): the human items still
visible are reported as *one* activity flagged ``burst_overflow`` (``turns`` =
human items seen, ``burst_texts`` = their texts) instead of pretending the
window was the whole story. (A marker missing from a *short* answer means the
thread was empty when last seen or was rewritten, not overflowed: everything
visible is reported, unflagged.) Human items that scrolled out of the window
entirely cannot be seen; when none is visible the check says so in ``detail``
only, because an agent's long tool run also overflows the window and must not
look human.

A node never gives a definite "this thread is gone" answer (a v1 limit), so
this provider never reports ``missing``: an unreachable node or an empty
answer is ``error`` or "nothing new", never a miss.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

from ..claude_lines import COMPACTION_PREFIX, parse_timestamp
from .base import (
    CheckResult,
    UpstreamActivity,
    UpstreamProvider,
)

#: Items the node returns per query.
WINDOW = 50
#: Marker of a thread seen empty: item ids are never empty, so it matches none.
EMPTY_THREAD = ""

_HUMAN_ITEM_TYPES = frozenset({"text", "message"})


class NodeUnavailable(Exception):
    """The node could not answer (offline, timed out, refused)."""


class NodeTranscriptClient(Protocol):
    """The one call the provider needs from a paired node."""

    def newest_items(self, thread_id: str, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` items of ``thread_id``, oldest first.

        Raises ``NodeUnavailable`` when the node cannot answer. An unknown
        thread yields an empty list: the node cannot tell "gone" apart.
        """
        ...


def _timestamp(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        return parse_timestamp(value)  # the same ISO 8601 rules as the JSONL provider
    return None


def _is_human(item: Mapping[str, Any]) -> bool:
    if item.get("role") != "user":
        return False
    if item.get("type", "text") not in _HUMAN_ITEM_TYPES:
        return False
    text = item.get("text")
    return isinstance(text, str) and not text.startswith(COMPACTION_PREFIX)


class PairedNodeProvider(UpstreamProvider):
    """Checks a thread on a paired node through a ``NodeTranscriptClient``."""

    name: ClassVar[str] = "paired-node"

    def __init__(self, client: NodeTranscriptClient, window: int = WINDOW) -> None:
        self.client = client
        self.window = window

    def check(self, thread_id: str, marker: str | None) -> CheckResult:
        try:
            raw_items = self.client.newest_items(thread_id, self.window)
        except (NodeUnavailable, OSError) as exc:
            return CheckResult.error(marker, f"node unavailable: {exc}")
        if not isinstance(raw_items, list):
            return CheckResult.error(marker, "node answered with a non-list")
        # Items without a usable id can be neither a marker nor deduped.
        items = [
            item
            for item in raw_items
            if isinstance(item, Mapping) and isinstance(item.get("id"), str) and item["id"]
        ]
        if not items:
            # Seen empty: say so, unless an earlier item already marks our place.
            return CheckResult.found([], EMPTY_THREAD if marker is None else marker)
        ids = [item["id"] for item in items]
        newest = ids[-1]
        if marker is None:
            fresh = items
            overflowed = False
        elif marker in ids:
            fresh = items[len(ids) - ids[::-1].index(marker) :]
            overflowed = False
        elif len(raw_items) < self.window:
            # The whole transcript fits: it was empty when last seen, or our
            # item is gone because it was rewritten (not a burst). Report what
            # is there; item ids dedupe re-reads.
            fresh = items
            overflowed = False
        else:
            fresh = items
            overflowed = True
        humans = [item for item in fresh if _is_human(item)]
        if not overflowed:
            activities = [
                UpstreamActivity(
                    activity_id=item["id"],
                    occurred_at=_timestamp(item.get("timestamp")),
                    text=item["text"],
                )
                for item in humans
            ]
            return CheckResult.found(activities, newest)
        if not humans:
            return CheckResult.found(
                [], newest, f"window of {self.window} overflowed; no human item visible"
            )
        last = humans[-1]
        burst = UpstreamActivity(
            activity_id=f"burst:{humans[0]['id']}..{last['id']}",
            occurred_at=_timestamp(last.get("timestamp")),
            text=last["text"],
            turns=len(humans),
            burst_overflow=True,
            burst_texts=tuple(item["text"] for item in humans),
        )
        return CheckResult.found(
            [burst], newest, f"window of {self.window} overflowed; burst flagged"
        )
