"""INV2 across processes: a gateway's queue holds at most one notice per pair, also when another
process removed the pair and this one watched it again before its next sweep.

Found by the nemesis's long runs (SQLite, slow profile, seeds 51017 and 51018; docs/nemesis.md):
gateway A held W's notice for T; gateway B removed the pair (deleted T, or reset W); A, before
its sweep withdrew the stale line, watched T again (re-creating T first when it was deleted)
and an event froze the new cursor: A queued the new episode's notice beside the stale one, two
lines for one pair in its queue (the replay's INV2). Delivery is not affected (R21: a drain
drops the stale line and delivers the one for the durable L, as the test shows), but the queue
is not what INV2 says until A's next sweep. Fixed by R5's replacement: a notice entering a
queue replaces the earlier episode's text for its pair.
"""

from __future__ import annotations

import pytest

from sessionstate import Gateway
from sessionstate.shared.formats import notice_text

W, T = "agent:w:main", "agent:t:main"
HUMAN = {"actor_type": "human", "summary": "a human message"}


def remove_elsewhere(b: Gateway, how: str) -> None:
    if how == "delete the target":
        b.ops.delete_session(T)
    else:
        b.ops.reset_session(W)


def watch_again(a: Gateway, how: str) -> None:
    if how == "delete the target":
        a.create_session(T)
    a.watch(W, T)


@pytest.mark.parametrize("how", ["delete the target", "reset the watcher"])
def test_a_pair_removed_elsewhere_and_watched_again_holds_one_notice_in_the_queue(db_url, how):
    with Gateway.open(db_url, notify_on_create=False) as a, Gateway.open(db_url, notify_on_create=False) as b:
        a.create_session(W)
        a.create_session(T)
        a.watch(W, T)
        a.record_event(T, "human_direct_message", **HUMAN)
        remove_elsewhere(b, how)  # another process: a has not swept since
        watch_again(a, how)
        seed = a.ops.cursor_positions(W, T).last_seen
        assert a.record_event(T, "human_direct_message", **HUMAN) is not None
        assert a.drain_system_events(W) == [notice_text(T, seed)]  # delivery is right either way (R21)
        a.record_event(T, "human_direct_message", **HUMAN)
        remove_elsewhere(b, how)
        watch_again(a, how)
        a.record_event(T, "human_direct_message", **HUMAN)
        held = [e.text for e in a.ops.queued_events(W)]
        assert len(held) == 1, held  # INV2
