"""Goal and compaction producers: hooks the agent runtime calls, with templated summaries.

The producers service. Summaries are one templated line and never carry the goal text or
the compacted content (the signal log holds metadata only).
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import InvalidArgument
from ..shared.keys import check_key
from .notice.protocol import NoticeProtocol
from ..shared.validation import check_count, check_line, shown

GOAL_CHANGES = ("created", "updated", "cleared")


class Producers:
    """Turns runtime hooks into ``goal_changed`` and ``compacted`` events."""

    def __init__(self, protocol: NoticeProtocol) -> None:
        self.protocol = protocol

    def goal_changed(
        self,
        session_key: str,
        change: str,
        *,
        actor_type: str,
        actor_id: str | None = None,
        agent_id: str | None = None,
        occurred_at: float | None = None,
    ) -> int | None:
        """Record ``goal_changed`` (notifies watchers, except the actor itself)."""
        if not isinstance(change, str) or change not in GOAL_CHANGES:
            raise InvalidArgument(f"goal change must be one of {list(GOAL_CHANGES)}, got {shown(change)}")
        if actor_id is not None:
            check_key(actor_id, "actor id")  # before it is formatted into the summary
        by = f" by {actor_id}" if actor_id else f" by {actor_type}" if isinstance(actor_type, str) else ""
        return self.protocol.record_event(
            session_key, "goal_changed", actor_type=actor_type, actor_id=actor_id,
            agent_id=agent_id, summary=f"goal {change}{by}"[:200], occurred_at=occurred_at,
        )

    def compacted(
        self,
        session_key: str,
        op_id: str,
        *,
        actor_type: str = "system",
        actor_id: str | None = None,
        agent_id: str | None = None,
        messages_before: int | None = None,
        messages_after: int | None = None,
        occurred_at: float | None = None,
    ) -> int | None:
        """Record ``compacted`` once per compaction operation (dedupe ``compacted:<opId>``)."""
        check_line(op_id, "op id", 200)
        if actor_id is not None:  # a session key (up to 512), as record_event takes it
            check_key(actor_id, "actor id")
        counts: list[Any] = [messages_before, messages_after]
        for value in counts:
            if value is not None:
                check_count(value, "message counts")
        detail = f": {messages_before} -> {messages_after} messages" if None not in counts else ""
        return self.protocol.record_event(
            session_key, "compacted", actor_type=actor_type, actor_id=actor_id, agent_id=agent_id,
            summary=f"history compacted{detail}", dedupe_key=f"compacted:{op_id}",
            occurred_at=occurred_at,
        )
