"""Spec section 11 at its edge: two gateways that both manage one watcher.

Found by the concurrency check when both processes drained and (un)watched the same
watchers: a notice queued in one process's memory outlives a cursor another process
removed, and the next drain fires ``drain`` on an ``unwatched`` pair. The supported setup
(one process delivers a watcher's notices) is what ``concurrency.py`` now runs; this test
records the behaviour outside it (shortest trace: 4 steps). Spec rule R17 now makes the
durable cursor decide at drain: the stale notice is dropped.
"""

from __future__ import annotations

from sessionstate import Gateway

W, T = "agent:a:main", "agent:b:main"


def test_drain_after_another_process_unwatched(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    with Gateway.open(url) as one, Gateway.open(url) as two:
        one.create_session(W)
        one.create_session(T)
        one.watch(W, T)                                                            # 1. one: watch
        one.record_event(T, "human_direct_message", actor_type="human", summary="hi")  # 2. one: notice queued
        two.unwatch(W, T)                                                          # 3. two: unwatch
        assert one.drain_system_events(W) == []                                    # 4. one: drain


def test_drain_after_another_process_drained_delivers_the_current_text(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    with Gateway.open(url) as one:
        one.create_session(W)
        one.create_session(T)
        one.watch(W, T)
        one.record_event(T, "human_direct_message", actor_type="human", summary="hi")
        with Gateway.open(url) as two:  # its sweep re-materialises the notice; it acks it
            assert len(two.drain_system_events(W)) == 1
            later = two.record_event(T, "human_direct_message", actor_type="human", summary="again")
        # one still holds the old text (changesSince 0); the durable cursor is pending from the
        # position two acknowledged, so one delivers that text, once.
        acknowledged = one.ops.cursor_positions(W, T).last_seen
        assert acknowledged == later - 1
        assert one.drain_system_events(W) == [
            f'Session "{T}" changed (other actor). Reconcile before acting: '
            f'session_status sessionKey "{T}" changesSince {acknowledged}.'
        ]
        assert one.ops.cursor_positions(W, T).last_seen == later
