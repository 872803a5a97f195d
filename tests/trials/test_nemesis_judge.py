"""The nemesis's verdict (trials/nemesis_judge.py) on small made-up histories: each check finds
what it is for, and a history that breaks nothing passes. The real runs are in test_nemesis.py."""

from __future__ import annotations

from typing import Any

from trials.nemesis_judge import Durable, Verdict, check_claims, judge
from trials.nemesis_world import STABLE_PAIRS

W, T = STABLE_PAIRS[0]  # a stable pair: nothing unwatches, resets or deletes it
CHURN = "agent:c0:main"


def text(target: str, since: int) -> str:
    return (f'Session "{target}" changed (other actor). Reconcile before acting: session_status sessionKey'
            f' "{target}" changesSince {since}.')


def entry(t: float, op: str, **fields: Any) -> dict[str, Any]:
    return {"t": t, "w": "g0", "life": 0, "op": op, **fields}


def record(t: float, session: str, summary: str, seq: int | None, **extra: Any) -> dict[str, Any]:
    event = {"session_key": session, "kind": "human_direct_message", "actor_type": "human", "actor_id": None,
             "summary": summary, **extra}
    return entry(t, "record", events=[event], seqs=[seq], api="sync")


def drain(t: float, line: str, version: int, tag: str = "D") -> dict[str, Any]:
    return entry(t, "drain", watcher=W, lines=[line], tag=tag, versions={T: version})


def world(**changes: Any) -> Durable:
    """T's log: 11 by a human, 12 by W itself; W's cursor acknowledged both (the other stable
    pairs caught up on empty logs)."""
    cursors = {pair: (0, 0, 0) for pair in STABLE_PAIRS}
    cursors[(W, T)] = (12, 12, 12)
    base = dict(events={11: (T, "a", "human_direct_message", None), 12: (T, "b", "goal_changed", W)},
                heads={T: (12, 0)}, cursors=cursors)
    base.update(changes)
    return Durable(**base)


def clean() -> list[dict[str, Any]]:
    return [record(1, T, "a", 11), record(2, T, "b", 12), drain(3, text(T, 10), 12)]


def rules(verdict: Verdict) -> set[str]:
    return {finding.split(":")[0] for finding in verdict.findings}


def test_a_history_that_breaks_nothing_passes():
    verdict = judge(clean(), world(), {(W, T): 10})
    assert verdict.findings == [] and verdict.acknowledged == 2 and verdict.delivered == 1


def test_an_acknowledged_event_missing_from_the_log_is_lost_unless_pruned_or_deleted():
    history = clean() + [record(4, T, "c", 13), record(5, CHURN, "d", 14)]
    verdict = judge(history, world(), {(W, T): 10})
    assert rules(verdict) == {"LOST"} and verdict.lost == 1  # the churn session's event may be gone
    assert judge(history, world(heads={T: (13, 13)}), {(W, T): 10}).findings == []  # pruned: accounted


def test_one_sequence_given_to_two_calls_and_one_key_given_two_sequences():
    twice = clean() + [record(4, T, "c", 12)]
    assert "TWICE" in rules(judge(twice, world(), {(W, T): 10}))
    keyed = clean() + [record(4, T, "a", 11, dedupe_key="k"), record(5, T, "a", 13, dedupe_key="k")]
    assert "R10" in rules(judge(keyed, world(), {(W, T): 10}))


def test_a_rolled_back_event_in_the_log_and_a_recording_call_that_raised():
    history = clean() + [entry(4, "rolled_back", events=[{"session_key": T, "summary": "a"}], seqs=[11]),
                         entry(5, "record", events=[{"session_key": T, "summary": "e"}], error="StorageError: x")]
    assert rules(judge(history, world(), {(W, T): 10})) == {"R9", "R15"}


def test_an_episode_delivered_twice_unless_the_first_drain_stayed_unknown():
    again = clean() + [drain(4, text(T, 10), 12)]
    verdict = judge(again, world(), {(W, T): 10})
    assert rules(verdict) == {"INV10"} and verdict.duplicated == 1
    unknown = [record(1, T, "a", 11), record(2, T, "b", 12), drain(3, text(T, 10), 12, tag="U"),
               drain(4, text(T, 10), 12)]
    verdict = judge(unknown, world(), {(W, T): 10})
    assert verdict.findings == [] and verdict.repeated_after_unknown == 1


def test_a_notice_about_the_watchers_own_act_and_an_event_no_notice_showed():
    own = clean() + [drain(4, text(T, 11), 12)]  # after 11 only W's own event 12
    assert "INV5" in rules(judge(own, world(), {(W, T): 10}))
    unseen = [record(1, T, "a", 11), record(2, T, "b", 12)]  # the cursor passed 11, no line showed it
    assert rules(judge(unseen, world(), {(W, T): 10})) == {"LIV2"}


def test_a_feed_that_reports_an_event_never_committed():
    history = clean() + [entry(4, "feed", events=[[T, "n1", None, 99]])]
    assert rules(judge(history, world(), {(W, T): 10})) == {"R22"}


def test_a_claim_that_did_not_stay_with_the_last_attach():
    attaches = [entry(1, "attach", watcher=W, server="s1", generation=1),
                entry(2, "attach", watcher=W, server="s2", generation=2)]
    verdict = Verdict()
    check_claims(attaches, world(claims={W: "s1"}, servers={"s1", "s2"}), {"s1": [W], "s2": []}, verdict)
    assert rules(verdict) == {"R20"} and len(verdict.findings) == 1
    verdict = Verdict()  # the database right, a server's memory not: it still serves W as claimed
    check_claims(attaches, world(claims={W: "s2"}, servers={"s1", "s2"}), {"s1": [W], "s2": [W]}, verdict)
    assert rules(verdict) == {"R20"} and "server s1 serves" in verdict.findings[0]
    verdict = Verdict()
    check_claims(attaches, world(claims={W: "s2"}, servers={"s1", "s2"}), {"s1": [], "s2": [W]}, verdict)
    assert verdict.findings == []


def test_an_attach_never_answered_may_have_committed():
    # The short PostgreSQL schedule at seed 1: s1 attached W; a taker s2 began an attach during
    # s1's stall and was killed before its answer. s2's attach committed, so s1 took back only
    # what nobody held (R20); s2's lease then ran out and released W: held by nobody.
    attaches = [entry(1, "attach", watcher=W, server="s1", generation=1),
                entry(2, "attaching", watcher=W, server="s2")]
    verdict = Verdict()
    check_claims(attaches, world(claims={}, servers={"s1"}), {"s1": [], "s2": []}, verdict)
    assert verdict.findings == []
    verdict = Verdict()  # s2 still alive and holding it: its attach committed
    check_claims(attaches, world(claims={W: "s2"}, servers={"s1", "s2"}), {"s1": [], "s2": [W]}, verdict)
    assert verdict.findings == []
    verdict = Verdict()  # nobody holds it while s2 still lives: R20 was broken
    check_claims(attaches, world(claims={}, servers={"s1", "s2"}), {"s1": [], "s2": []}, verdict)
    assert rules(verdict) == {"R20"}
    verdict = Verdict()  # an attach answered with an error is not pending: s1 must still hold it
    answered = attaches + [entry(3, "attach", watcher=W, server="s2", error="StorageUnavailable")]
    check_claims(answered, world(claims={}, servers={"s1"}), {"s1": [], "s2": []}, verdict)
    assert rules(verdict) == {"R20"}


def test_a_drain_never_answered_may_have_delivered_what_its_process_saw_committed():
    # The long PostgreSQL run (seed 20261205): W's drain committed and its worker was killed
    # before it wrote the lines down; the cursor moved past events no recorded line showed.
    def life(t: float, op: str, life_no: int, **fields: Any) -> dict[str, Any]:
        return {**entry(t, op, **fields), "life": life_no}

    events = [record(1, T, "a", 11), record(2, T, "b", 12)]
    killed = events + [life(3, "draining", 0, watcher=W, turn=True), life(9, "attach", 1, watcher=W)]
    assert judge(killed, world(), {(W, T): 10}).findings == []
    unknown = events + [life(3, "draining", 0, watcher=W, turn=False),
                        life(4, "drain", 0, watcher=W, turn=False, error="CommitOutcomeUnknown")]
    assert judge(unknown, world(), {(W, T): 10}).findings == []
    # Answered (with nothing, or failed before its commit): nothing excuses the gap.
    answered = events + [life(3, "draining", 0, watcher=W, turn=True),
                         life(4, "drain", 0, watcher=W, turn=True, lines=[], tag="D", versions={})]
    assert rules(judge(answered, world(), {(W, T): 10})) == {"LIV2"}
    failed = events + [life(3, "draining", 0, watcher=W, turn=True),
                       life(4, "drain", 0, watcher=W, turn=True, error="StorageUnavailable")]
    assert rules(judge(failed, world(), {(W, T): 10})) == {"LIV2"}
    # An event recorded after the killed process's next life began: no drain of it saw that one.
    late = [life(3, "draining", 0, watcher=W, turn=True), life(5, "attach", 1, watcher=W),
            record(6, T, "a", 11), record(7, T, "b", 12)]
    assert rules(judge(late, world(), {(W, T): 10})) == {"LIV2"}
