"""The texts other processes and tools read back: the stale notice line (R5: deduplicated on
its exact text) and the protocol trace's format version (spec section 15).

Shared by the services that write them and the clients that read them (operator views, the
trace checker, the replays), so neither reaches into the other's layer."""

from __future__ import annotations

TRACE_VERSION = 1


def notice_text(target_key: str, since: int) -> str:
    # The spec's notice template (tests/protocol/test_spec_sync.py checks this function
    # against it), as an f-string: the fast path.
    return (
        f'Session "{target_key}" changed (other actor). Reconcile before acting: '
        f'session_status sessionKey "{target_key}" changesSince {since}.'
    )
