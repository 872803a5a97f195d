"""The transcripts service: append messages, human turns, recent user messages.

Transcripts live in the database (``store/transcripts.py``); the
signal log never holds message content, so a human turn writes both: the message here and a
``human_direct_message`` event (metadata and a one-line summary) through ``record_event``.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import InvalidArgument
from .locking import locked
from ..shared.keys import SessionRef, check_key
from .notice.protocol import NoticeProtocol
from .registry import Registry
from ..store import MessageRecord, Store
from ..shared.validation import MAX_COUNT, check_actor_type, check_count, check_json, check_text

ROLES = ("user", "assistant", "tool", "system")
MAX_MESSAGE_CHARS = 1_000_000
# provenance, tool calls and tool results: each at most this much JSON (and MAX_JSON_DEPTH deep)
MAX_MESSAGE_DATA_BYTES = 1_000_000
DEFAULT_ACTOR = {"user": "human", "assistant": "agent", "tool": "agent", "system": "system"}


class Transcripts:
    """Owns the ``session_messages`` table; records human turns through the notice protocol."""

    def __init__(self, store: Store, clock: Callable[[], float], protocol: NoticeProtocol, registry: Registry) -> None:
        self.store = store
        self.clock = clock
        self.protocol = protocol
        self.registry = registry

    @locked
    def append_message(
        self,
        session_key: str,
        role: str,
        text: str,
        *,
        agent_id: str | None = None,
        actor_type: str | None = None,
        actor_id: str | None = None,
        provenance: dict[str, Any] | None = None,
        tool_calls: list[Any] | None = None,
        tool_result: Any = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> int:
        """Append one transcript message; returns its id. Usage adds to the session's counters."""
        target = self.protocol.resolve(session_key, agent_id)
        if not isinstance(role, str) or role not in ROLES:
            raise InvalidArgument(f"role must be one of {list(ROLES)}")
        check_text(text, "text", MAX_MESSAGE_CHARS)
        actor_type = check_actor_type(actor_type or DEFAULT_ACTOR[role])
        if actor_id is not None:
            check_key(actor_id, "actor id")
        if provenance is not None and not isinstance(provenance, dict):
            raise InvalidArgument("provenance must be an object")
        if tool_calls is not None and not isinstance(tool_calls, list):
            raise InvalidArgument("tool_calls must be a list")
        for name, data in (("provenance", provenance), ("tool_calls", tool_calls), ("tool_result", tool_result)):
            check_json(data, name, max_bytes=MAX_MESSAGE_DATA_BYTES)
        for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
            check_count(value, name, MAX_COUNT // 2)  # the session's counters add them up
        now = self.clock()
        with self.store.transaction():
            self.registry.ensure_meta(target)
            message_id = self.store.transcripts.append(
                *target, role, text, actor_type=actor_type, actor_id=actor_id, provenance=provenance,
                tool_calls=tool_calls, tool_result=tool_result, input_tokens=input_tokens,
                output_tokens=output_tokens, created_at=now,
            )
            self.store.meta.update(*target, last_activity_at=now)
            if input_tokens or output_tokens:
                self.store.meta.add_usage(*target, input_tokens, output_tokens)
        return message_id

    @locked
    def human_message(
        self,
        session_key: str,
        text: str,
        *,
        channel: str | None = None,
        sender: str | None = None,
        agent_id: str | None = None,
    ) -> int | None:
        """A human's turn typed straight into the session: transcript row, stored reply route,
        and, when at least one cursor targets the session (R24), a ``human_direct_message``
        event (watchers get one notice). Returns its sequence; ``None`` when nobody watches
        the session (nothing appended) or storage failed (R15)."""
        target = self.protocol.resolve(session_key, agent_id)
        check_text(text, "text", MAX_MESSAGE_CHARS)
        with self.store.transaction():  # route and message together; the event after the commit (R9)
            if channel is not None:
                self.registry.set_route(target[0], channel, sender, agent_id=target[1])
            self.append_message(
                target[0], "user", text, agent_id=target[1], actor_type="human",
                provenance={"kind": "human", "isUser": True, "channel": channel},
            )
        # R24: recorded only while someone watches; a watch committing after this read seeds
        # above the turn's sequence, so it would never have been notified of it (R4).
        if not self.store.has_watchers(*target):
            return None
        via = f" via {channel}" if channel else ""
        payload = {"channel": channel, "turns": 1} if channel else {"turns": 1}
        return self.protocol.record_event(
            target[0], "human_direct_message", agent_id=target[1], actor_type="human",
            summary=f"human message{via}"[:200], payload=payload,
        )

    @locked
    def recent_user_messages(self, session_key: str, limit: int = 10, *, agent_id: str | None = None) -> list[str]:
        """The newest ``limit`` user-role messages the gateway put into the session, oldest
        first, exactly as delivered (inter-session headers included): the upstream monitor's
        self-echo check compares external prompts with these."""
        check_count(limit, "limit")
        target = self.protocol.resolve(session_key, agent_id)
        return self.store.transcripts.recent_texts(*target, "user", limit)

    @locked
    def transcript(self, session_key: str, *, limit: int = 1000, agent_id: str | None = None) -> list[MessageRecord]:
        """The newest ``limit`` messages, oldest first."""
        check_count(limit, "limit")
        return self.store.transcripts.recent(*self.protocol.resolve(session_key, agent_id), limit)

    # -- reads for the tool layer ---------------------------------------------------------------

    @locked
    def recent(self, target: SessionRef, limit: int, offset: int = 0) -> list[MessageRecord]:
        """The newest ``limit`` messages of a resolved session after skipping the ``offset``
        newest, oldest first."""
        return self.store.transcripts.recent(*target, limit, offset)

    @locked
    def first_text(self, target: SessionRef, role: str) -> str | None:
        return self.store.transcripts.first_text(*target, role)

    @locked
    def stats(self, target: SessionRef) -> tuple[int, float | None]:
        """(message count, newest message time) of a resolved session."""
        return self.store.transcripts.stats(*target)
