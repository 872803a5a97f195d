"""A batch's cursor write travels with its COMMIT only when it is the last statement of a
transaction the batch opened itself (issue 49): inside a caller's transaction (R9) it is sent
at once, so what the caller reads next in that transaction already holds it."""

from __future__ import annotations

from sessionstate import Gateway, notice_text

T1, T2, W = "agent:a:t1", "agent:a:t2", "agent:a:w"


def test_a_batch_in_a_callers_transaction_writes_its_cursors_before_the_caller_reads_them(pg_url: str) -> None:
    gw = Gateway.open(pg_url, notify_on_create=False, record_created=False)
    try:
        for key in (T1, T2, W):
            gw.create_session(key)
        gw.watch(W, T1)
        gw.watch(W, T2)
        events = [{"session_key": t, "kind": "goal_changed", "actor_type": "human", "summary": "x"} for t in (T1, T2)]
        with gw.transaction() as store:
            sequences = gw.record_events(events)
            assert None not in sequences
            # Read in the same transaction, before its commit: the freezes are there.
            held = {(c.target_key, c.positions) for c in store.cursors_held_by(W)}
            assert held == {(T1, (0, sequences[0], sequences[0])), (T2, (0, sequences[1], sequences[1]))}
        assert sorted(gw.pending_system_events(W)) == sorted([notice_text(T1, 0), notice_text(T2, 0)])
    finally:
        gw.close()
