"""The tool policy as the tool layer names it: the definitions live in ``sessionstate.shared.policy``
(the runtime holds a gateway's policy; the tools apply it)."""

from __future__ import annotations

from ..shared.policy import (
    ALL_TOOLS,
    LEAF_TOOLS,
    MAX_TREE_DEPTH,
    ORCHESTRATOR_TOOLS,
    PROFILES,
    VISIBILITY_LEVELS,
    ParentOf,
    ToolPolicy,
    can_see,
    is_descendant,
)

__all__ = [
    "ALL_TOOLS",
    "LEAF_TOOLS",
    "MAX_TREE_DEPTH",
    "ORCHESTRATOR_TOOLS",
    "PROFILES",
    "VISIBILITY_LEVELS",
    "ParentOf",
    "ToolPolicy",
    "can_see",
    "is_descendant",
]
