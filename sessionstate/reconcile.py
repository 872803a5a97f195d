"""The JSON shape of ``changesSince`` events (spec section 10), built in one tight loop:
a page holds up to 200 of them, so per-event work here is most of a reconciliation's cost."""

from __future__ import annotations

from typing import Any, Sequence

from .timefmt import iso_millis
from .validation import visible_payload


def events_json(rows: Sequence[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Rows of ``SqliteStore.event_page`` -> the event objects agents receive."""
    out: list[dict[str, Any]] = []
    append = out.append
    for sequence, kind, actor_type, occurred_at, summary, actor_id, run_id, payload in rows:
        event = {
            "sequence": sequence,
            "kind": kind,
            "actorType": actor_type,
            "occurredAt": iso_millis(occurred_at),
            "summary": summary,
        }
        if actor_id is not None:
            event["actorId"] = actor_id
        if run_id is not None:
            event["runId"] = run_id
        if payload:
            shown = visible_payload(payload)
            if shown is not None:
                event["payload"] = shown
        append(event)
    return out
