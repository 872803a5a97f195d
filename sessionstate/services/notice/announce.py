"""R27's announcement: one bounded line telling an agent's main session that a session was created.

The line is gateway-written; the foreign parts (the new key, its label) enter as inline
untrusted text (spec section 14: JSON string literals, line breaks escaped), so the line can
never be taken for a notice. It is an announcement, not a protocol notice: queued in memory
after the commit, gone with a restart.
"""

from __future__ import annotations

from ...shared.fencing import quote_untrusted
from ...shared.keys import resolve_agent_id

LABEL_MAX_CHARS = 200
LINE_MAX_CHARS = 8_192
MAIN_SESSION_REST = "main"


def main_session_of(agent_id: str) -> str:
    """The agent's main session key (``agent:<agentId>:main``)."""
    return f"agent:{agent_id}:{MAIN_SESSION_REST}"


def announcement_target(key: str, agent_id: str, parent: str | None) -> str | None:
    """The main session to tell about ``key``, or ``None``: not the main session itself, not
    a sub-agent the main session's own runs spawned (its parent is the main session)."""
    main = main_session_of(agent_id)
    if key == main or parent == main or resolve_agent_id(main, None) != agent_id:
        return None  # (the last: an agent id no main key can name)
    return main


def created_line(key: str, kind: str, label: str | None) -> str:
    """``[session created] "<key>" (kind <kind>)[ label "<label>"]``, at most 8,192 characters."""
    line = f"[session created] {quote_untrusted(key)} (kind {kind})"
    if label:
        line += f" label {quote_untrusted(label[:LABEL_MAX_CHARS])}"
    if len(line) > LINE_MAX_CHARS:  # cannot happen with today's key and label bounds; kept as the rule
        line = line[: LINE_MAX_CHARS - 1] + "…"
    return line
