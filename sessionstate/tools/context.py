"""What every tool call knows: the gateway, the resolved caller, its metadata and the policy;
and the two questions every tool that names another session asks (which session is meant,
may the caller see it)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import InvalidArgument, UnknownSession
from ..keys import agent_of, is_agent_qualified
from ..store.session_meta import MetaRecord
from .errors import Forbidden
from .policy import ToolPolicy, can_see

if TYPE_CHECKING:
    from ..gateway import Gateway

Target = tuple[str, str]
# Thread-scoped chat sessions are not targets: the parent channel's session is.
THREAD_KEY = re.compile(r":thread:[^:]+\Z")


@dataclass(frozen=True)
class ToolContext:
    gw: "Gateway"
    caller: Target
    meta: MetaRecord
    policy: ToolPolicy

    @classmethod
    def open(cls, gw: "Gateway", caller_key: str) -> "ToolContext":
        caller = gw._resolve(caller_key, None)
        return cls(gw, caller, gw._meta_of(caller), gw.tool_policy)

    @property
    def key(self) -> str:
        return self.caller[0]

    @property
    def visibility(self) -> str:
        return self.policy.effective_visibility(self.meta.sandboxed)

    def visible(self, target: Target) -> bool:
        return can_see(self.policy, self.caller, self.meta.sandboxed, target, self.gw._parent_of)

    def require_visible(self, target: Target) -> Target:
        if not self.visible(target):
            raise Forbidden(
                f"session {target[0]!r} (agent {target[1]!r}) is not visible from {self.key!r}"
                f" (visibility {self.visibility!r})"
            )
        return target

    def watches(self, target: Target) -> bool:
        """The caller holds a cursor on ``target`` (a spawn edge or a watch made for it)."""
        return self.gw.store.cursor(self.key, *target) is not None

    def resolve(self, key: str, *, refuse_thread: bool = False) -> Target:
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
            return self.gw._resolve(key, None)
        agent = self.caller[1]
        agents = self.gw.store.agents_with_session_key(key)
        if agent in agents:
            return (key, agent)
        alias = f"agent:{agent}:{key}"
        if agent_of(alias) == agent and self.gw.store.get_session(alias, agent) is not None:
            return (alias, agent)
        if len(agents) == 1:
            return (key, agents[0])
        raise UnknownSession(f"unknown session {key!r}")

    def resolve_visible(self, key: str, *, refuse_thread: bool = False) -> Target:
        return self.require_visible(self.resolve(key, refuse_thread=refuse_thread))
