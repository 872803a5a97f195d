"""Session keys: agent qualification, sub-agent detection, validation."""

from __future__ import annotations

from functools import lru_cache

from ..errors import InvalidArgument
from .validation import refuse_surrogates

# A registered session as the runtime names it everywhere: (session key, agent id).
SessionRef = tuple[str, str]

DEFAULT_AGENT_ID = "main"
MAX_KEY_LENGTH = 512
_AGENT_PREFIX = "agent:"


@lru_cache(maxsize=65_536)  # keys repeat on every event of a session: parse each once
def agent_of(key: str) -> str | None:
    """The agent id an ``agent:<id>:<rest>`` key carries, else ``None``."""
    if not key.startswith(_AGENT_PREFIX):
        return None
    agent, sep, rest = key[len(_AGENT_PREFIX):].partition(":")
    return agent if sep and agent and rest else None


def is_agent_qualified(key: str) -> bool:
    return agent_of(key) is not None


def is_subagent_key(key: str) -> bool:
    return ":subagent:" in key


@lru_cache(maxsize=65_536)
def is_main_style_watcher(key: str) -> bool:
    """Watchers woken through ``on_wake``: agent-qualified and not a sub-agent (R12)."""
    return is_agent_qualified(key) and not is_subagent_key(key)


def check_key(key: object, field: str = "session key") -> str:
    if not isinstance(key, str):
        raise InvalidArgument(f"{field} must be a string, not {type(key).__name__}")
    if not key or len(key) > MAX_KEY_LENGTH:
        raise InvalidArgument(f"{field} must be 1 to {MAX_KEY_LENGTH} characters")
    # Every whitespace character except " " is non-printable, so this equals the per-character
    # test "isspace() or not isprintable()" (checked over all code points) at C speed.
    if not key.isprintable() or " " in key:
        refuse_surrogates(key, field)  # surrogates are not printable: name them precisely
        raise InvalidArgument(f"{field} {key[:80]!r} contains whitespace or control characters")
    return key


def resolve_agent_id(key: str, agent_id: object | None) -> str | None:
    """The agent id of ``key``: carried by the key, or the one given for unqualified keys.

    Returns ``None`` for an unqualified key given without an agent id (the caller looks it
    up). A given agent id that contradicts the key is refused.
    """
    carried = agent_of(key)
    if agent_id is not None:
        check_key(agent_id, "agent id")
        if carried is not None and agent_id != carried:
            raise InvalidArgument(f"agent id {agent_id!r} contradicts key {key!r}")
        return str(agent_id)
    return carried
