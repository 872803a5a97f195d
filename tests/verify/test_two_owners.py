"""Spec section 11 at its edge: two gateways that both manage one watcher.

Found by the concurrency check when both processes drained and (un)watched the same
watchers: a notice queued in one process's memory outlives a cursor another process
removed, and the next drain fires ``drain`` on an ``unwatched`` pair. The supported setup
(one process delivers a watcher's notices) is what ``concurrency.py`` now runs; this test
records the behaviour outside it (shortest trace: 4 steps).
"""

from __future__ import annotations

import pytest

from sessionstate import Gateway, ProtocolError

W, T = "agent:a:main", "agent:b:main"


@pytest.mark.xfail(strict=True, raises=ProtocolError,
                   reason="a drain after another process unwatched raises ProtocolError instead of dropping the stale notice")
def test_drain_after_another_process_unwatched(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    with Gateway.open(url) as one, Gateway.open(url) as two:
        one.create_session(W)
        one.create_session(T)
        one.watch(W, T)                                                            # 1. one: watch
        one.record_event(T, "human_direct_message", actor_type="human", summary="hi")  # 2. one: notice queued
        two.unwatch(W, T)                                                          # 3. two: unwatch
        assert one.drain_system_events(W) == []                                    # 4. one: drain
