"""Visibility and tool profiles: which sessions a caller may name, which tools it may call.

Visibility levels, widest last: ``self`` (the caller only), ``tree`` (the caller and the
sessions it spawned, transitively), ``agent`` (every session of the caller's agent), ``all``
(every session; other agents' only with ``agent_to_agent``). Sandboxed callers are clamped to
``tree`` whatever the configuration. A session of another agent is never visible below
``all`` + ``agent_to_agent``, not even in the caller's own tree.

Tools: the profile (``coding``: all seven; ``messaging``: list, history, send, status), plus
``also_allow``, minus the caller agent's deny list. Then spawn depth: a sub-agent at depth
``d`` is a leaf when ``d >= max_spawn_depth`` and keeps only ``session_status`` (the tool its
stale notices name); a shallower one is an orchestrator and keeps ``sessions_spawn``,
``subagents``, ``sessions_list``, ``sessions_history`` (and ``session_status``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Final, Mapping

from ..errors import InvalidArgument

VISIBILITY_LEVELS: Final = ("self", "tree", "agent", "all")
ALL_TOOLS: Final = (
    "sessions_list", "sessions_history", "sessions_send", "sessions_spawn",
    "sessions_yield", "subagents", "session_status",
)
PROFILES: Final[Mapping[str, frozenset[str]]] = {
    "coding": frozenset(ALL_TOOLS),
    "messaging": frozenset({"sessions_list", "sessions_history", "sessions_send", "session_status"}),
}
LEAF_TOOLS: Final = frozenset({"session_status"})
ORCHESTRATOR_TOOLS: Final = frozenset({"sessions_spawn", "subagents", "sessions_list", "sessions_history", "session_status"})


@dataclass(frozen=True)
class ToolPolicy:
    visibility: str = "tree"
    agent_to_agent: bool = False
    profile: str = "coding"
    also_allow: frozenset[str] = frozenset()
    deny: Mapping[str, frozenset[str]] = field(default_factory=dict)  # agent id -> tools
    max_spawn_depth: int = 1

    def __post_init__(self) -> None:
        if self.visibility not in VISIBILITY_LEVELS:
            raise InvalidArgument(f"visibility must be one of {list(VISIBILITY_LEVELS)}")
        if self.profile not in PROFILES:
            raise InvalidArgument(f"profile must be one of {sorted(PROFILES)}")
        for name in set(self.also_allow) | {t for tools in self.deny.values() for t in tools}:
            if name not in ALL_TOOLS:
                raise InvalidArgument(f"unknown tool {name!r} in the tool policy")
        if isinstance(self.max_spawn_depth, bool) or not isinstance(self.max_spawn_depth, int) or not 1 <= self.max_spawn_depth <= 8:
            raise InvalidArgument("max_spawn_depth must be an integer from 1 to 8")
        object.__setattr__(self, "also_allow", frozenset(self.also_allow))
        object.__setattr__(self, "deny", {a: frozenset(t) for a, t in self.deny.items()})

    def effective_visibility(self, sandboxed: bool) -> str:
        if sandboxed and VISIBILITY_LEVELS.index(self.visibility) > VISIBILITY_LEVELS.index("tree"):
            return "tree"
        return self.visibility

    def allowed_tools(self, agent_id: str, spawn_depth: int) -> frozenset[str]:
        tools = (PROFILES[self.profile] | self.also_allow) - self.deny.get(agent_id, frozenset())
        if spawn_depth >= 1:
            tools &= LEAF_TOOLS if spawn_depth >= self.max_spawn_depth else ORCHESTRATOR_TOOLS
        return tools


# (key, agent id) -> parent (key, agent id) or None
ParentOf = Callable[[tuple[str, str]], "tuple[str, str] | None"]
MAX_TREE_DEPTH: Final = 64


def is_descendant(target: tuple[str, str], ancestor: tuple[str, str], parent_of: ParentOf) -> bool:
    current = parent_of(target)
    for _ in range(MAX_TREE_DEPTH):  # bounded: a corrupt cycle must not hang a tool call
        if current is None:
            return False
        if current == ancestor:
            return True
        current = parent_of(current)
    return False


def can_see(
    policy: ToolPolicy,
    caller: tuple[str, str],
    caller_sandboxed: bool,
    target: tuple[str, str],
    parent_of: ParentOf,
) -> bool:
    if target == caller:
        return True
    level = policy.effective_visibility(caller_sandboxed)
    if target[1] != caller[1] and not (level == "all" and policy.agent_to_agent):
        return False
    if level == "self":
        return False
    if level in ("agent", "all"):
        return True
    return is_descendant(target, caller, parent_of)
