"""What every tool call knows: the gateway, the resolved caller, its metadata and the policy;
and the two questions every tool that names another session asks (which session is meant,
may the caller see it)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InvalidArgument, UnknownSession
from ..shared.keys import SessionRef, agent_of, is_agent_qualified
from ..shared.policy import ToolPolicy, can_see
from ..store import MetaRecord
from .tool_errors import Forbidden
from .host import ToolHost

# Thread-scoped chat sessions are not targets: the parent channel's session is.
THREAD_KEY = re.compile(r":thread:[^:]+\Z")


@dataclass(frozen=True)
class ToolContext:
    gw: ToolHost
    caller: SessionRef
    meta: MetaRecord
    policy: ToolPolicy

    @classmethod
    def open(cls, gw: ToolHost, caller_key: str) -> "ToolContext":
        caller = gw.ops.resolve(caller_key)
        return cls(gw, caller, gw.registry.meta_of(caller), gw.tool_policy)

    @property
    def key(self) -> str:
        return self.caller[0]

    @property
    def visibility(self) -> str:
        return self.policy.effective_visibility(self.meta.sandboxed)

    def visible(self, target: SessionRef) -> bool:
        return can_see(self.policy, self.caller, self.meta.sandboxed, target, self.gw.registry.parent_of)

    def require_visible(self, target: SessionRef) -> SessionRef:
        if not self.visible(target):
            raise Forbidden(
                f"session {target[0]!r} (agent {target[1]!r}) is not visible from {self.key!r}"
                f" (visibility {self.visibility!r})"
            )
        return target

    def watches(self, target: SessionRef) -> bool:
        """The caller holds a cursor on ``target`` (a spawn edge or a watch made for it)."""
        return self.gw.ops.cursor_positions(self.key, target[0], target_agent_id=target[1]) is not None

    def resolve(self, key: str, *, refuse_thread: bool = False) -> SessionRef:
        """The session a key names, from the caller's point of view.

        Agent-qualified keys name themselves. A bare key (``main``, ``global``) means, in
        order: that key under the caller's agent, the alias ``agent:<callerAgent>:<key>``,
        the one agent's session of that key.
        """
        if refuse_thread and THREAD_KEY.search(key):
            raise InvalidArgument(
                f"{key!r} is a thread-scoped session; send to the parent channel's session key instead"
            )
        if key == "current":
            return self.caller
        if is_agent_qualified(key):
            return self.gw.ops.resolve(key)
        agent = self.caller[1]
        if self.gw.ops.session_exists(key, agent):
            return (key, agent)
        alias = f"agent:{agent}:{key}"
        if agent_of(alias) == agent and self.gw.ops.session_exists(alias, agent):
            return (alias, agent)
        try:
            return self.gw.ops.resolve(key)  # the one agent's session of that key
        except UnknownSession:
            pass
        raise UnknownSession(f"unknown session {key!r}")

    def resolve_visible(self, key: str, *, refuse_thread: bool = False) -> SessionRef:
        return self.require_visible(self.resolve(key, refuse_thread=refuse_thread))
