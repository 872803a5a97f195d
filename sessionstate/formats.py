"""The texts other processes and tools read back: the stale notice line (R5: deduplicated on
its exact text) and the protocol trace's format version (spec section 15).

Shared by the services that write them and the clients that read them (operator views, the
trace checker, the replays), so neither reaches into the other's layer."""

from __future__ import annotations

NOTICE_TEMPLATE = (
    'Session "{target}" changed (other actor). Reconcile before acting: '
    'session_status sessionKey "{target}" changesSince {since}.'
)
TRACE_VERSION = 1


def notice_text(target_key: str, since: int) -> str:
    # Same text as NOTICE_TEMPLATE (a test holds them equal); an f-string is the fast path.
    return (
        f'Session "{target_key}" changed (other actor). Reconcile before acting: '
        f'session_status sessionKey "{target_key}" changesSince {since}.'
    )
