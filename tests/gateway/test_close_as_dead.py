"""``Gateway.close(unregister=False)``, the drill of a process that died (R20): its change feed
is still closed (a listening connection must not outlive the gateway), its server row stays for
another process to release, and a gateway that never opened a feed closes the same way
(``NoticeProtocol.shut``)."""

from __future__ import annotations

from sessionstate import Gateway


def test_a_gateway_closed_as_a_dead_process_closes_its_feed_and_leaves_its_row(db_url):
    gw = Gateway.open(db_url, serve=["agent:a:*"], pump=True)  # registered, its feed open
    feed, server_id = gw.cluster.feed, gw.ops.diagnostics().server_id
    assert feed is not None and server_id is not None
    closed: list[bool] = []
    close_feed = feed.close
    feed.close = lambda: (closed.append(True), close_feed())[1]  # type: ignore[method-assign]
    gw.close(unregister=False)
    assert closed == [True]
    with Gateway.open(db_url, serve=[], pump=False) as other:
        with other.store.transaction():
            assert other.store.serving.heartbeat(server_id, 0.0)  # its row is still there


def test_a_gateway_without_a_feed_closes_as_a_dead_process_without_error(db_url):
    gw = Gateway.open(db_url)
    gw.cluster.feed = None
    gw.close(unregister=False)
    assert gw.closed
