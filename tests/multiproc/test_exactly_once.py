"""R21 and INV10: a drain delivers one line per pending pair, by the durable cursor, in any
process; the queue left behind matches the cursor (INV2, INV4)."""

from __future__ import annotations

from sessionstate import Gateway
from sessionstate import notice_text

W, T = "agent:a:main", "agent:b:main"
# Each session logs its own `created` first (R27): W is 1, T is 2, so a watch of T made after
# both starts at 2, and its first notice says changesSince 2.
SEED = 2


def _human(gw: Gateway, summary: str = "hi") -> int:
    sequence = gw.record_event(T, "human_direct_message", actor_type="human", summary=summary)
    assert sequence is not None
    return sequence


def test_two_servers_of_one_watcher_deliver_one_line_per_target(db_url):
    """The reported bug: one drain returned two lines (two changesSince) for one target and
    left a stale line queued while the cursor was caught up."""
    url = db_url
    with Gateway.open(url) as a:
        a.create_session(W)
        a.create_session(T)
        a.watch(W, T)
        first = _human(a)                          # a queues "changesSince 2" (SEED)
        with Gateway.open(url) as b:               # b's startup sweep queues it too
            assert b.drain_system_events(W) == [notice_text(T, SEED)]
            second = _human(a)                     # a freezes again: "changesSince <first>"
            third = _human(b)                      # raises the material watermark only
            lines = a.drain_system_events(W)
            assert lines == [notice_text(T, first)]
            assert a.ops.cursor_positions(W, T) == (second, third, third)
            # INV4 in a: the follow-up for the pending pair, nothing else.
            assert a.pending_system_events(W) == [notice_text(T, second)]
            # b's queue is empty; its drain still delivers what the cursor owes, once.
            assert b.drain_system_events(W) == [notice_text(T, second)]
            assert a.drain_system_events(W) == []
            assert a.ops.cursor_positions(W, T) == (third, third, third)


def test_a_drain_delivers_what_the_cursor_owes_when_nothing_is_queued_here(db_url):
    url = db_url
    with Gateway.open(url) as a, Gateway.open(url) as b:
        a.create_session(W)
        a.create_session(T)
        a.watch(W, T)
        _human(a)
        assert b.pending_system_events(W) == []
        assert b.drain_system_events(W) == [notice_text(T, SEED)]
        assert a.drain_system_events(W) == []      # a's queued line was stale: dropped
        assert a.pending_system_events(W) == []


def test_plain_lines_keep_their_place(db_url):
    url = db_url
    with Gateway.open(url) as a:
        a.create_session(W)
        a.create_session(T)
        a.watch(W, T)
        a.ops.enqueue_system_event(W, "announcement one")
        _human(a)
        a.ops.enqueue_system_event(W, "announcement two")
        assert a.drain_system_events(W) == ["announcement one", notice_text(T, SEED), "announcement two"]
