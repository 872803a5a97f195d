"""How the demos print: numbered headings, counted blocks of queue lines, indented JSON.

Both demos (story.py in one process, processes.py across two) print through these, so their
output reads alike."""

from __future__ import annotations

import json
from typing import Any


def heading(number: int, text: str) -> None:
    print(f"\n== {number}. {text}")


def show_lines(label: str, lines: list[str]) -> None:
    print(f"   {label}: {len(lines)} line(s)")
    for line in lines:
        print(f"     | {line}")


def show_json(data: Any, *, keep_events: int = 4) -> None:
    """Pretty JSON with one event per line, long event lists elided in the middle."""
    shown = json.loads(json.dumps(data))
    changes = shown.get("stateChanges")
    events = changes.pop("events") if changes is not None else None
    text = json.dumps(shown, indent=2)
    if events is not None:
        rows = [json.dumps(e) for e in events]
        if len(rows) > keep_events:
            rows = rows[:2] + [f'"... {len(rows) - keep_events} more ..."'] + rows[-(keep_events - 2):]
        body = ",\n".join(f"      {r}" for r in rows)
        listing = '"events": [\n' + body + "\n    ],\n    " if rows else '"events": [],\n    '
        text = text.replace('"stateChanges": {\n    ', '"stateChanges": {\n    ' + listing, 1)
    for line in text.splitlines():
        print(f"     {line}")
