"""INV2 across processes: a gateway's queue holds at most one notice per pair, also when another
process deleted the pair's target and this one watched it again before its next sweep.

Found by the nemesis's long run (SQLite, ``./dev trials --only nemesis --seed 51017
--nemesis-backend sqlite --nemesis-seconds 600``; docs/nemesis.md): gateway A held W's notice
for T; gateway B deleted T (W's cursor went with it); A, before its sweep withdrew the stale
line, re-created T, watched it and froze the new cursor, and queued the new episode's notice
beside the stale one: two lines for one pair in A's queue (the replay's INV2). Delivery is not
affected (R21: the drain drops the stale line and delivers the one for the durable L, as the
test shows), but the queue is not what INV2 says until A's next sweep. Not fixed yet: the
test states the rule and is expected to fail until it is.
"""

from __future__ import annotations

import pytest

from sessionstate import Gateway
from sessionstate.shared.formats import notice_text

W, T = "agent:w:main", "agent:t:main"


@pytest.mark.xfail(strict=True, reason="nemesis finding: a stale notice stays beside the new episode's until the"
                                       " next sweep (INV2 in one gateway's queue)")
def test_a_pair_deleted_elsewhere_and_watched_again_holds_one_notice_in_the_queue(db_url):
    with Gateway.open(db_url, notify_on_create=False) as a, Gateway.open(db_url, notify_on_create=False) as b:
        a.create_session(W)
        a.create_session(T)
        a.watch(W, T)
        a.record_event(T, "human_direct_message", actor_type="human", summary="first episode")
        b.ops.delete_session(T)  # another process: a has not swept since
        a.create_session(T)
        a.watch(W, T)
        sequence = a.record_event(T, "human_direct_message", actor_type="human", summary="second episode")
        seed = a.ops.cursor_positions(W, T).last_seen
        assert sequence is not None and sequence > seed
        assert a.drain_system_events(W) == [notice_text(T, seed)]  # delivery is right either way (R21)
        a.record_event(T, "human_direct_message", actor_type="human", summary="third episode")
        b.ops.delete_session(T)
        a.create_session(T)
        a.watch(W, T)
        a.record_event(T, "human_direct_message", actor_type="human", summary="fourth episode")
        held = [e.text for e in a.ops.queued_events(W)]
        assert len(held) == 1, held  # INV2
