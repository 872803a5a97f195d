"""The JSON shape of ``changesSince`` events (spec section 10), built in one tight loop:
a page holds up to 200 of them, so per-event work here is most of a reconciliation's cost."""

from __future__ import annotations

from typing import Any, Sequence

from ...shared.timefmt import MILLIS_TAIL, second_prefix
from ...shared.validation import visible_payload

_UNSEEN = object()  # equal to no instant


def events_json(rows: Sequence[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Rows of a store's ``event_page`` (``contract.EventPageRow``) -> the event objects
    agents receive. ``occurredAt`` is ``timefmt.iso_micros`` of each event's microseconds,
    written out here so that consecutive events in the same second share one prefix, and
    consecutive events at the same instant one text (a page's instants are all whole
    microseconds or all epoch seconds, so equal values are one instant)."""
    out: list[dict[str, Any]] = []
    append = out.append
    last_second = None
    prefix = occurred_text = ""
    # The previous row's instant: the events of one batch (one transaction) share one, so its
    # text is written once.
    last_occurred: Any = _UNSEEN
    for sequence, kind, actor_type, occurred, summary, actor_id, run_id, payload in rows:
        if occurred != last_occurred:
            last_occurred = occurred
            if occurred.__class__ is int:  # whole microseconds, rounded by the database
                second, within = divmod(occurred, 1_000_000)
            else:  # epoch seconds: timefmt.epoch_micros, inline
                second = int(occurred)
                within = round((occurred - second) * 1e6)
                if not 0 <= within < 1_000_000:  # a negative epoch, or a fraction rounded up to 1 s
                    second, within = divmod(second * 1_000_000 + within, 1_000_000)
            if second != last_second:
                prefix = second_prefix(second)
                last_second = second
            occurred_text = prefix + MILLIS_TAIL[within // 1000]
        event = {
            "sequence": sequence,
            "kind": kind,
            "actorType": actor_type,
            "occurredAt": occurred_text,
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
