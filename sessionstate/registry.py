"""Gateway methods for the session registry's runtime side: metadata, routes, model override.

Mixed into ``Gateway``. ``register_session`` is ``create_session`` plus a metadata row, in one
transaction; sessions made by plain ``create_session`` read as the defaults (no session id,
not sandboxed, spawn depth from the parent chain) until something writes their metadata.
"""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING, Any, Callable

from .errors import InvalidArgument, UnknownSession
from .keys import check_key, resolve_agent_id
from .locking import locked
from .store import MetaRecord, MetadataTable
from .validation import check_line

if TYPE_CHECKING:
    from .store import Store

Target = tuple[str, str]
MAX_MODEL_LENGTH = 200
MAX_ROUTE_LENGTH = 256
MAX_CHAIN = 64


def check_optional_line(value: object, field: str, max_length: int) -> str | None:
    return None if value is None else check_line(value, field, max_length)


class RegistryMixin:
    store: "Store"
    clock: Callable[[], float]
    _lock: threading.RLock

    # Provided by Gateway.
    create_session: Callable[..., None]
    _resolve: Callable[[Any, Any], Target]

    @property
    def _meta(self) -> MetadataTable:
        return self.store.meta

    @locked
    def register_session(
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
        """``create_session`` plus runtime metadata; returns the new session id.

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
            self.create_session(key, agent_id=agent_id, kind=kind, parent=parent, label=label, run_id=run_id)
            agent = resolve_agent_id(key, agent_id) or self._resolve(key, agent_id)[1]
            self._meta.insert(MetaRecord(
                key, agent, session_id, channel=channel, model=model, thinking=thinking,
                runtime=runtime, sandboxed=sandboxed, spawn_depth=depth,
                last_activity_at=self.clock(),
            ))
        return session_id

    @locked
    def session_meta(self, key: str, agent_id: str | None = None) -> MetaRecord:
        """The session's metadata (defaults when it has no row)."""
        target = self._resolve(key, agent_id)
        return self._meta_of(target)

    def _meta_of(self, target: Target) -> MetaRecord:
        record = self._meta.get(*target)
        if record is not None:
            return record
        return MetaRecord.defaults(*target)._replace(spawn_depth=self._chain_depth(target))

    def _parent_of(self, target: Target) -> Target | None:
        row = self.store.get_session(*target)
        if row is None or row.parent_key is None or row.parent_agent_id is None:
            return None
        return (row.parent_key, row.parent_agent_id)

    def _chain_depth(self, target: Target) -> int:
        depth, current = 0, self._parent_of(target)
        while current is not None and depth < MAX_CHAIN:
            depth += 1
            current = self._parent_of(current)
        return depth

    def _ensure_meta(self, target: Target) -> MetaRecord:
        """The session's row, inserted with the defaults first if missing (inside a transaction)."""
        record = self._meta.get(*target)
        if record is None:
            record = self._meta_of(target)._replace(session_id=uuid.uuid4().hex, last_activity_at=self.clock())
            self._meta.insert(record)
        return record

    def _update_meta(self, target: Target, **fields: Any) -> None:
        with self.store.transaction():
            self._ensure_meta(target)
            self._meta.update(*target, **fields)

    def resolve_session_id(self, session_id: str) -> Target:
        """(key, agent id) of the session with this session id, or ``UnknownSession``."""
        check_key(session_id, "session id")
        record = self._meta.by_session_id(session_id)
        if record is None:
            raise UnknownSession(f"no session with session id {session_id!r}")
        return (record.session_key, record.agent_id)

    @locked
    def set_model_override(self, key: str, model: str | None, *, agent_id: str | None = None) -> None:
        """Set the session's model override; ``None`` (or ``"default"``) clears it."""
        target = self._resolve(key, agent_id)
        if model is not None:
            check_line(model, "model", MAX_MODEL_LENGTH)
        self._update_meta(target, model_override=None if model in (None, "default") else model)

    @locked
    def set_route(self, key: str, channel: str, to: str | None = None, *, agent_id: str | None = None) -> None:
        """Store where replies to the session go (``lastChannel``/``lastTo``); announces reuse it."""
        target = self._resolve(key, agent_id)
        check_line(channel, "channel", MAX_ROUTE_LENGTH)
        check_optional_line(to, "to", MAX_ROUTE_LENGTH)
        self._update_meta(target, last_channel=channel, last_to=to)
