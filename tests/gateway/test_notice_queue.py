"""What the notice queue holds across a restart, another process's serving and a delete: a
restart's sweep queues each target's notice under that target's name, even where one target's
agent id is another's key and both notices share their ``since``; a notice whose watcher
another process serves (R19) does not keep the next watcher of the same event from its notice;
a deleted session's own queued lines, notices and plain lines alike, go with it: the key created
again starts with none (R14); a notice entering the queue replaces its pair's earlier text and
nothing else (R5)."""

from __future__ import annotations

from sessionstate import Gateway
from sessionstate.services.notice.queue import SystemEventQueue
from sessionstate.shared.formats import notice_text
from tests.gateway.helpers import human

MANAGER = "agent:main:main"


def test_a_restart_queues_each_notice_under_its_own_target_when_keys_and_agent_ids_cross(db_url):
    # Unqualified keys with their agent ids: alpha's agent id is beta's key, beta's key is
    # gamma's agent id. Without creation events every pair was last seen at 0, so the sweep's
    # notices (one batch) share their ``since``; each must still name its own target.
    targets = [("alpha", "beta"), ("beta", "x"), ("gamma", "alpha")]
    with Gateway.open(db_url, record_created=False) as gw:
        gw.create_session(MANAGER)
        for key, agent in targets:
            gw.create_session(key, agent_id=agent)
            gw.watch(MANAGER, key, target_agent_id=agent)
        for key, agent in targets:
            assert gw.record_event(key, "human_direct_message", actor_type="human", summary="hi",
                                   agent_id=agent)
    with Gateway.open(db_url) as gw:
        assert sorted(gw.pending_system_events(MANAGER)) == sorted(notice_text(key, 0) for key, _ in targets)


def test_a_watcher_served_elsewhere_does_not_keep_the_next_from_its_notice(db_url):
    target, served = "agent:t:main", "agent:m:main"
    watchers = ["agent:a:main", served, "agent:y:main"]  # served here: only the middle one
    with Gateway.open(db_url, serve=["agent:m:*"]) as gw:
        for key in [*watchers, target]:
            gw.create_session(key)
        for watcher in watchers:
            gw.watch(watcher, target)
        human(gw, target)
        queued = {watcher: gw.pending_system_events(watcher) for watcher in watchers}
    assert [len(lines) for lines in queued.values()] == [0, 1, 0]
    assert queued[served][0].startswith(f'Session "{target}" changed')


def test_a_deleted_session_takes_its_queued_lines_with_it(db_url):
    watcher, target = "agent:w:main", "agent:t:main"
    with Gateway.open(db_url) as gw:
        gw.create_session(watcher)
        gw.create_session(target)
        gw.watch(watcher, target)
        human(gw, target)
        assert gw.ops.enqueue_system_event(watcher, "a plain line")
        assert len(gw.pending_system_events(watcher)) == 2
        gw.ops.delete_session(watcher)
        gw.create_session(watcher)        # the same key, a new session: nothing is owed to it
        assert gw.pending_system_events(watcher) == []




def test_a_notice_entering_the_queue_replaces_its_pairs_earlier_text_and_nothing_else():
    """R5 in the queue itself: the earlier text is an episode another process ended; it leaves
    (its removal observed, as the trace sees it), while a plain line and another pair's notice
    stay, and the same text again is held once."""
    queue, removed = SystemEventQueue(), []
    queue.observe_removals(lambda key, entries: removed.extend((key, e.text) for e in entries))
    watcher, pair, other = "agent:w:main", ("agent:t:main", "t"), ("agent:u:main", "u")
    earlier, later, others = notice_text(pair[0], 1), notice_text(pair[0], 4), notice_text(other[0], 2)
    assert queue.enqueue(watcher, "a plain line")
    assert queue.enqueue(watcher, earlier, pair)
    assert queue.enqueue(watcher, others, other)
    assert not queue.enqueue(watcher, earlier, pair)  # the same text: already held
    assert queue.enqueue(watcher, later, pair)
    assert [(e.text, e.target) for e in queue.peek(watcher)] == [
        ("a plain line", None), (others, other), (later, pair)]
    assert removed == [(watcher, earlier)]
