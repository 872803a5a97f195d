"""``sessionstate tail``: what happens in a database now, from whichever process, as it happens.

It opens the store's change feed (R22: SQLite polls ``PRAGMA data_version``, PostgreSQL LISTENs
for the commits' NOTIFY) without registering as a server: it claims nothing, serves nothing and
writes nothing. Each batch the feed reports becomes lines:

* ``notice``: a cursor became owed a notice (a watcher's target changed by another actor);
* ``event``: a notifying event was recorded (the target and its actor);
* ``cursors``: a watcher's cursors or claim changed (a drain, an acknowledgement, a watch);
* ``wake``: a watcher was woken (its shared wake slot moved, R23; read at each feed wake-up and
  at least every ``poll`` seconds, the slot table is not in the feed);
* ``resync``: the feed lost track (a reconnect, a trimmed change log): what was missed is not
  listed, the next lines are current again.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from ..shared.formats import notice_text
from ..statemachine import NOTIFYING_KINDS
from ..shared.timefmt import iso_millis

if TYPE_CHECKING:
    from ..facade.gateway import Gateway

Line = dict[str, Any]


def follow(
    gw: "Gateway",
    emit: Callable[[Line], None],
    *,
    poll: float = 0.25,
    stop: Callable[[], bool] = lambda: False,
    ready: Callable[[], None] = lambda: None,
) -> None:
    """Report each change to ``emit`` until ``stop()`` is true (checked every ``poll`` seconds);
    ``ready()`` once the feed is open, so a change made after it returns is reported."""
    with gw.locked() as store:
        # The wake slots before the feed: a wake between the two is reported (a wake line too
        # many at worst); the other way round, an event's wake could fall into the baseline.
        wakes = store.serving.wake_slots()
        feed = store.open_change_feed(tuple(sorted(NOTIFYING_KINDS)))
    ready()
    try:
        while not stop():
            changed = feed.wait(poll)
            with gw.locked() as store:
                lines = _lines(feed.take(), gw.clock()) if changed else []
                now_wakes = store.serving.wake_slots()
            for watcher, at in sorted(now_wakes.items()):
                if wakes.get(watcher) != at:
                    lines.append({"type": "wake", "watcher": watcher, "at": iso_millis(at)})
            wakes = now_wakes
            for line in lines:
                emit(line)
    finally:
        feed.close()


def _lines(changes: Any, now: float) -> list[Line]:
    at = iso_millis(now)
    lines: list[Line] = []
    if changes.resync:
        lines.append({"type": "resync", "at": at})
    for key, agent_id, actor_id in changes.material:
        lines.append({"type": "event", "at": at, "session": key, "agentId": agent_id, "actorId": actor_id})
    for p in changes.frozen:
        lines.append({"type": "notice", "at": at, "watcher": p.watcher, "target": p.target_key,
                      "targetAgentId": p.target_agent_id, "changesSince": p.last_seen,
                      "text": notice_text(p.target_key, p.last_seen)})
    for watcher in sorted(set(changes.watchers)):
        lines.append({"type": "cursors", "at": at, "watcher": watcher})
    return lines


def printer(as_json: bool, out: TextIO = sys.stdout) -> Callable[[Line], None]:
    """One line per change: JSON (``--json``) or a short human form; flushed at once."""

    def emit(line: Line) -> None:
        if as_json:
            text = json.dumps(line, ensure_ascii=False)
        elif line["type"] == "notice":
            text = f"{line['at']}  notice   {line['watcher']} <- {line['target']} (changesSince {line['changesSince']})"
        elif line["type"] == "event":
            actor = f" by {line['actorId']}" if line["actorId"] else ""
            text = f"{line['at']}  event    {line['session']}{actor}"
        elif line["type"] == "cursors":
            text = f"{line['at']}  cursors  {line['watcher']}"
        elif line["type"] == "wake":
            text = f"{line['at']}  wake     {line['watcher']}"
        else:
            text = f"{line['at']}  resync   the feed lost track; lines before this one may be missing"
        print(text, file=out, flush=True)

    return emit
