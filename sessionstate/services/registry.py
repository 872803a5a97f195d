"""The registry service: the session registry's runtime side (metadata, routes, model
override, the parent chain the visibility rules walk).

``create_session`` (``Gateway.create_session``) is the notice protocol's ``create_session``
plus a metadata row, in one transaction. Sessions made by the protocol's alone
(``gw.ops.create_session``: drills, models, ``sessions_spawn``, which writes its own row) read
as the defaults (no session id, not sandboxed, spawn depth from the parent chain) until
something writes their metadata.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable

from ..errors import InvalidArgument, UnknownSession
from ..shared.keys import SessionRef, check_key, resolve_agent_id
from .locking import locked
from .notice.protocol import NoticeProtocol
from ..store import MetaRecord, SessionRecord, Store
from ..shared.validation import check_line

MAX_MODEL_LENGTH = 200
MAX_ROUTE_LENGTH = 256
MAX_CHAIN = 64


def check_optional_line(value: object, field: str, max_length: int) -> str | None:
    return None if value is None else check_line(value, field, max_length)


class Registry:
    """Owns the ``session_meta`` table; creates sessions through the notice protocol."""

    def __init__(self, store: Store, clock: Callable[[], float], protocol: NoticeProtocol) -> None:
        self.store = store
        self.clock = clock
        self.protocol = protocol

    @locked
    def create_session(
        self,
        key: str,
        *,
        agent_id: str | None = None,
        kind: str = "main",
        parent: str | None = None,
        label: str | None = None,
        run_id: str | None = None,
        channel: str | None = None,
        model: str | None = None,
        thinking: str | None = None,
        runtime: str | None = None,
        sandboxed: bool | None = None,
    ) -> str:
        """Register a session and its runtime metadata; returns its new session id. With
        ``parent``, a spawn edge (``child_spawned`` and the parent's seeded cursor, R4).

        ``sandboxed=None`` inherits the parent's sandbox; the spawn depth is the parent's + 1.
        """
        check_optional_line(channel, "channel", MAX_ROUTE_LENGTH)
        check_optional_line(model, "model", MAX_MODEL_LENGTH)
        check_optional_line(thinking, "thinking", 64)
        check_optional_line(runtime, "runtime", 64)
        if sandboxed is not None and not isinstance(sandboxed, bool):
            raise InvalidArgument("sandboxed must be a boolean")
        parent_meta = self.session_meta(parent) if parent is not None else None
        depth = parent_meta.spawn_depth + 1 if parent_meta else 0
        if sandboxed is None:
            sandboxed = parent_meta.sandboxed if parent_meta else False
        session_id = uuid.uuid4().hex
        with self.store.transaction():
            self.protocol.create_session(key, agent_id=agent_id, kind=kind, parent=parent, label=label, run_id=run_id)
            agent = resolve_agent_id(key, agent_id) or self.protocol.resolve(key, agent_id)[1]
            self.store.meta.insert(MetaRecord(
                key, agent, session_id, channel=channel, model=model, thinking=thinking,
                runtime=runtime, sandboxed=sandboxed, spawn_depth=depth,
                last_activity_at=self.clock(),
            ))
        return session_id

    @locked
    def session_meta(self, key: str, agent_id: str | None = None) -> MetaRecord:
        """The session's metadata (defaults when it has no row)."""
        target = self.protocol.resolve(key, agent_id)
        return self.meta_of(target)

    @locked
    def list_sessions(self) -> list[SessionRecord]:
        """Every session, oldest first."""
        return self.store.list_sessions()

    @locked
    def session_record(self, target: SessionRef) -> SessionRecord | None:
        return self.store.get_session(*target)

    @locked
    def all_meta(self) -> dict[SessionRef, MetaRecord]:
        """Every stored metadata row (sessions without one are absent: see ``meta_of``)."""
        return self.store.meta.all()

    @locked
    def insert_meta(self, record: MetaRecord) -> None:
        """A new session's row (inside the transaction that creates the session)."""
        self.store.meta.insert(record)

    @locked
    def meta_of(self, target: SessionRef) -> MetaRecord:
        record = self.store.meta.get(*target)
        if record is not None:
            return record
        return MetaRecord.defaults(*target)._replace(spawn_depth=self._chain_depth(target))

    @locked
    def parent_of(self, target: SessionRef) -> SessionRef | None:
        row = self.store.get_session(*target)
        if row is None or row.parent_key is None or row.parent_agent_id is None:
            return None
        return (row.parent_key, row.parent_agent_id)

    def _chain_depth(self, target: SessionRef) -> int:
        depth, current = 0, self.parent_of(target)
        while current is not None and depth < MAX_CHAIN:
            depth += 1
            current = self.parent_of(current)
        return depth

    @locked
    def ensure_meta(self, target: SessionRef) -> MetaRecord:
        """The session's row, inserted with the defaults first if missing (inside a transaction)."""
        record = self.store.meta.get(*target)
        if record is None:
            record = self.meta_of(target)._replace(session_id=uuid.uuid4().hex, last_activity_at=self.clock())
            self.store.meta.insert(record)
        return record

    @locked
    def update_meta(self, target: SessionRef, **fields: Any) -> None:
        with self.store.transaction():
            self.ensure_meta(target)
            self.store.meta.update(*target, **fields)

    @locked
    def resolve_session_id(self, session_id: str) -> SessionRef:
        """(key, agent id) of the session with this session id, or ``UnknownSession``."""
        check_key(session_id, "session id")
        record = self.store.meta.by_session_id(session_id)
        if record is None:
            raise UnknownSession(f"no session with session id {session_id!r}")
        return (record.session_key, record.agent_id)

    @locked
    def set_model_override(self, key: str, model: str | None, *, agent_id: str | None = None) -> None:
        """Set the session's model override; ``None`` (or ``"default"``) clears it."""
        target = self.protocol.resolve(key, agent_id)
        if model is not None:
            check_line(model, "model", MAX_MODEL_LENGTH)
        self.update_meta(target, model_override=None if model in (None, "default") else model)

    @locked
    def set_route(self, key: str, channel: str, to: str | None = None, *, agent_id: str | None = None) -> None:
        """Store where replies to the session go (``lastChannel``/``lastTo``); announces reuse it."""
        target = self.protocol.resolve(key, agent_id)
        check_line(channel, "channel", MAX_ROUTE_LENGTH)
        check_optional_line(to, "to", MAX_ROUTE_LENGTH)
        self.update_meta(target, last_channel=channel, last_to=to)
