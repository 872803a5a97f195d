"""Behaviour pinned after mutmut's run over the recording path of the notice service
(``services/notice/``: recording.py, batch_decisions.py, group_commit.py, core.py), with
``tests/gateway`` as the selection: its survivors and "no tests" mutants, and mutants of the
retries, the options and the messages that it had not reached yet. Each test names what a user
of the gateway can observe and no other test in ``tests/gateway`` asserted:

- the messages of ``record_events``/``prepare_events``/``record_prepared`` for input of the
  wrong shape, and that input of the wrong shape is refused before anything is written (a
  mapping or a number where a list belongs, a list of something that is not a prepared event);
- an interrupt (a ``BaseException``) escaping a group commit: a caller whose events were
  committed before it keeps its sequence, every caller still unanswered hears of the interrupt,
  and none is left with no outcome;
- a queued caller interrupted after its batch committed still passes the wake-up on to the
  callers behind it;
- R15's retries: a storage failure known to have rolled back (or one after which every event
  would be found again by its dedupe key) is tried again, at most three attempts in all, with
  growing pauses and a warning each; anything else, or inside the caller's own transaction,
  gives ``None`` at once, with the error logged and counted;
- the protocol's options: their defaults, the smallest values accepted, and the messages that
  refuse the others (also for ``Gateway(store)``, whose R27 switches are on by default);
- ``record_event``'s messages name the argument that was wrong.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from sessionstate import Gateway, InvalidArgument, StorageConflict, StorageFull, StorageUnavailable, UnknownSession
from sessionstate.services.notice import group_commit, recording

MANAGER = "agent:main:main"
PEER = "agent:main:peer"
CHILD = "agent:main:subagent:child"
EVENT = {"actor_type": "human", "summary": "hello"}
WAIT = 30.0  # only a hang reaches it


class Interrupted(BaseException):
    """Stands for KeyboardInterrupt (which pytest would take as its own)."""


@pytest.fixture
def gw(db_url: str) -> Iterator[Gateway]:
    # R27's announcement of PEER in MANAGER's queue is noise here.
    gateway = Gateway.open(db_url, clock=lambda: 1_800_000_000.0, notify_on_create=False)
    gateway.create_session(MANAGER)
    gateway.create_session(PEER)
    gateway.create_session(CHILD, kind="subagent", parent=MANAGER)
    gateway.watch(PEER, CHILD)
    yield gateway
    gateway.close()


# -- input of the wrong shape ------------------------------------------------------------------


@pytest.mark.parametrize("events", ["not a list", b"bytes", 7, {"session_key": CHILD}, {}], ids=repr)
def test_record_events_refuses_anything_but_a_sequence_by_its_message(gw, events):
    before = gw.store.dump()
    with pytest.raises(InvalidArgument) as refused:
        gw.record_events(events)
    assert refused.value.message == "events must be a sequence of mappings"
    with pytest.raises(InvalidArgument) as refused_alone:
        gw.ops.prepare_events(events)
    assert refused_alone.value.message == "events must be a sequence of mappings"
    assert gw.store.dump() == before


def test_record_events_names_the_item_that_is_not_a_mapping(gw):
    good = dict(session_key=CHILD, kind="goal_changed", **EVENT)
    before = gw.store.dump()
    with pytest.raises(InvalidArgument) as refused:
        gw.record_events([good, ["session_key", CHILD]])
    assert refused.value.message == "events[1] must be a mapping"
    assert gw.store.dump() == before


def test_record_events_names_the_item_with_a_bad_argument_name(gw):
    good = dict(session_key=CHILD, kind="goal_changed", **EVENT)
    before = gw.store.dump()
    with pytest.raises(InvalidArgument) as unknown:
        gw.record_events([good, good, dict(good, colour="red")])
    assert unknown.value.message == "events[2]: record_event() got unexpected keyword arguments ['colour']"
    with pytest.raises(InvalidArgument) as missing:
        gw.record_events([dict(session_key=CHILD, kind="goal_changed", actor_type="human")])
    assert missing.value.message == "events[0]: record_event() missing required keyword arguments ['summary']"
    assert gw.store.dump() == before


def test_record_event_names_a_bad_argument_name_when_it_gives_two_as_the_usual_call_does(gw):
    """Two keywords are what the usual call passes (the required ones); two with one of them
    wrong are refused by name, before anything is written."""
    before = gw.store.dump()
    with pytest.raises(TypeError) as unknown:
        gw.record_event(CHILD, "goal_changed", actor_type="human", colour="red")  # type: ignore[call-arg]
    assert str(unknown.value) == "record_event() got unexpected keyword arguments ['colour']"
    with pytest.raises(TypeError) as missing:
        gw.record_event(CHILD, "goal_changed", actor_type="human", actor_id=None)  # type: ignore[call-arg]
    assert str(missing.value) == "record_event() missing required keyword arguments ['summary']"
    assert gw.store.dump() == before


def test_an_event_without_its_optional_keywords_is_prepared_as_with_each_of_them_none(gw):
    every_optional_none = dict.fromkeys(["actor_id", "agent_id", "run_id", "payload", "dedupe_key", "occurred_at"])
    bare = gw.ops.prepare_event(CHILD, "goal_changed", actor_type="human", summary="s")
    assert bare == gw.ops.prepare_event(CHILD, "goal_changed", actor_type="human", summary="s", **every_optional_none)
    assert bare.target == (CHILD, "main") and bare.requested == (CHILD, None)


RECORD_PREPARED_REFUSED = "calls must be a sequence of sequences of prepared events (prepare_event)"


@pytest.mark.parametrize("shape", ["a number", "a mapping", "a string", "a call of strings", "a call that is a number",
                                   "a prepared event where a call belongs", "a stranger among prepared events"])
def test_record_prepared_refuses_anything_but_calls_of_prepared_events(gw, shape):
    prepared = gw.ops.prepare_event(CHILD, "goal_changed", **EVENT)
    calls: Any = {
        "a number": 7,
        "a mapping": {},  # iterates as nothing: it must not pass as zero calls
        "a string": "ab",
        "a call of strings": [["goal_changed"]],
        "a call that is a number": [7],
        "a prepared event where a call belongs": [prepared],  # a tuple, but of fields, not events
        "a stranger among prepared events": [[prepared, tuple(prepared)]],
    }[shape]
    before = gw.store.dump()
    with pytest.raises(InvalidArgument) as refused:
        gw.ops.record_prepared(calls)
    assert refused.value.message == RECORD_PREPARED_REFUSED
    assert gw.store.dump() == before
    # The same prepared event in a call of the right shape is recorded.
    (waiter,) = gw.ops.record_prepared([[prepared]])
    assert waiter.outcome() == [gw.ops.state_version(CHILD)]


# -- an interrupt escaping a group commit ------------------------------------------------------


def wait_queued(gw: Gateway, count: int) -> None:
    ticks = threading.Event()  # never set: its wait is the poll's pause
    for _ in range(int(WAIT * 1000)):
        if gw.ops.diagnostics().group_queued >= count:
            return
        ticks.wait(0.001)
    raise AssertionError(f"only {gw.ops.diagnostics().group_queued} of {count} callers queued")


def _queue_in_order(gw: Gateway, calls: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Start ``calls`` one by one while the test holds the write turn, each queued before the
    next starts (so the first is the one that drains); returns each call's result or exception."""
    outcomes: dict[str, Any] = {}

    def body(name: str, call: Callable[[], Any]) -> None:
        try:
            outcomes[name] = call()
        except BaseException as exc:  # the test looks at it
            outcomes[name] = exc

    threads = []
    with gw.locked():
        for name, call in calls.items():
            # daemon: a caller never woken must not keep the test run from ending
            threads.append(threading.Thread(target=body, args=(name, call), name=name, daemon=True))
            threads[-1].start()
            wait_queued(gw, len(threads))
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive(), f"{thread.name}: a caller never returned"
    return outcomes


def test_an_interrupt_in_a_group_commit_answers_every_caller_by_what_was_committed(gw, monkeypatch):
    """The batch rolls back on an unknown session, and its callers run again one transaction
    each; an interrupt in the fourth caller's own append leaves the callers before it with their
    committed sequences, and it and the caller after it (never run) with the interrupt."""
    real_append = gw.store.append_event

    def append_or_interrupt(*row: Any) -> Any:
        if row[6] == "interrupted here":  # the summary
            raise Interrupted
        return real_append(*row)

    monkeypatch.setattr(gw.store, "append_event", append_or_interrupt)
    before = gw.ops.state_version(CHILD)

    def record(summary: str, key: str = CHILD) -> Callable[[], Any]:
        return lambda: gw.record_event(key, "goal_changed", actor_type="human", summary=summary)

    outcomes = _queue_in_order(gw, {
        "drainer": record("first"),
        "answered": record("second"),
        "unknown": record("no such session", "agent:main:subagent:nobody"),
        "interrupted": record("interrupted here"),
        "after": record("never run"),
    })
    assert isinstance(outcomes["unknown"], UnknownSession)
    assert isinstance(outcomes["interrupted"], Interrupted)
    assert isinstance(outcomes["after"], Interrupted), "an unanswered caller hears of the interrupt"
    # The interrupt surfaces in the thread that was committing (the drainer), whose own event
    # was committed before it.
    assert isinstance(outcomes["drainer"], Interrupted)
    answered = outcomes["answered"]
    assert isinstance(answered, int) and answered > before, "a committed caller keeps its sequence"
    assert gw.ops.state_version(CHILD) == answered
    summaries = [c["summary"] for c in gw.session_status(CHILD, changes_since=before)["stateChanges"]["events"]]
    assert summaries == ["first", "second"]
    assert gw.ops.diagnostics().group_idle


def test_a_caller_interrupted_after_its_batch_committed_still_wakes_the_callers_behind_it(gw, monkeypatch):
    """Queued callers are woken as a chain, each by the one before; the third caller's wait is
    interrupted right after its wake-up, and the fourth must be woken all the same."""
    real_signal = group_commit.Signal
    made: list[group_commit.Signal] = []

    class InterruptedOnceWoken(real_signal):  # type: ignore[misc, valid-type]
        def wait(self, timeout: float | None = None) -> bool:
            super().wait(timeout)
            raise Interrupted

    def signal() -> group_commit.Signal:
        """The callers' wake-ups, the third one (the third caller's) interrupted."""
        made.append(InterruptedOnceWoken() if len(made) == 2 else real_signal())
        return made[-1]

    monkeypatch.setattr(group_commit, "Signal", signal)
    before = gw.ops.state_version(CHILD)
    outcomes = _queue_in_order(gw, {
        name: (lambda name=name: gw.record_event(CHILD, "goal_changed", actor_type="human", summary=name))
        for name in ("drainer", "second", "interrupted", "fourth")
    })
    assert isinstance(outcomes["interrupted"], Interrupted)
    assert sorted(outcomes[n] for n in ("drainer", "second", "fourth")) == [before + 1, before + 2, before + 4]
    # The interrupt came after the commit: its event is in the log with the others.
    summaries = [c["summary"] for c in gw.session_status(CHILD, changes_since=before)["stateChanges"]["events"]]
    assert summaries == ["drainer", "second", "interrupted", "fourth"]
    assert gw.ops.diagnostics().group_idle


# -- R15: which storage failures are tried again ------------------------------------------------


class FailingAppends:
    """Stands in for the store's appends, as recording calls them (a lone event's
    ``append_event``, a batch's ``append_and_read``): the first ``times`` calls raise
    ``error``, the rest append for real; counts the attempts."""

    def __init__(self, gw: Gateway, monkeypatch: pytest.MonkeyPatch, error: Exception, times: int) -> None:
        self.attempts = 0
        self.error, self.times = error, times
        for name in ("append_event", "append_and_read"):
            monkeypatch.setattr(gw.store, name, self._failing(getattr(gw.store, name)))

    def _failing(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def append(*args: Any) -> Any:
            self.attempts += 1
            if self.attempts <= self.times:
                raise self.error
            return real(*args)

        return append


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The retry pauses asked for, instead of sleeping them."""
    asked: list[float] = []
    monkeypatch.setattr(recording, "time", SimpleNamespace(sleep=asked.append, perf_counter=time.perf_counter))
    return asked


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sessionstate" and r.levelno == level]


def test_a_conflict_that_rolled_back_is_tried_again_until_it_commits(gw, monkeypatch, pauses, caplog):
    caplog.set_level(logging.WARNING, logger="sessionstate")
    failing = FailingAppends(gw, monkeypatch, StorageConflict("deadlock (injected)", retry_safe=True), times=2)
    before, recorded, failures = gw.ops.state_version(CHILD), gw.ops.stats["events_recorded"], gw.ops.stats["append_failures"]
    assert gw.record_event(CHILD, "goal_changed", **EVENT) == before + 1
    assert failing.attempts == 3
    assert pauses == [0.05, 0.1]
    assert _messages(caplog, logging.WARNING) == ["recording 1 event(s) failed (deadlock (injected)); retrying"] * 2
    assert _messages(caplog, logging.ERROR) == []
    assert gw.ops.stats["events_recorded"] == recorded + 1 and gw.ops.stats["append_failures"] == failures
    assert len(gw.pending_system_events(PEER)) == 1, "the notice follows the commit that succeeded"


def test_a_conflict_on_every_attempt_gives_up_after_the_third(gw, monkeypatch, pauses, caplog):
    caplog.set_level(logging.WARNING, logger="sessionstate")
    failing = FailingAppends(gw, monkeypatch, StorageConflict("deadlock (injected)", retry_safe=True), times=99)
    before, failures = gw.store.dump(), gw.ops.stats["append_failures"]
    assert gw.record_event(CHILD, "goal_changed", **EVENT) is None
    assert failing.attempts == 3 and pauses == [0.05, 0.1]
    assert _messages(caplog, logging.ERROR) == ["recording 1 event(s) (goal_changed) failed; the turn goes on"]
    assert gw.record_events([dict(session_key=CHILD, kind=kind, **EVENT) for kind in ("goal_changed", "compacted")]) \
        == [None, None]
    assert _messages(caplog, logging.ERROR)[1:] == ["recording 2 event(s) (compacted, goal_changed) failed; the turn goes on"]
    assert gw.ops.stats["append_failures"] == failures + 3
    assert gw.store.dump() == before and gw.pending_system_events(PEER) == []


NOT_TRIED_AGAIN = {
    # the commit may have happened: running it again could record the event twice
    "outcome unknown, no dedupe key": (StorageUnavailable("connection lost (injected)"), {}),
    "outcome unknown, one of two without a dedupe key": (StorageUnavailable("connection lost (injected)"),
                                                         {"dedupe_key": "once", "burst": True}),
    # rolled back, but running it again cannot help
    "disk full": (StorageFull("disk full (injected)", retry_safe=True), {}),
}


@pytest.mark.parametrize("case", sorted(NOT_TRIED_AGAIN))
def test_a_failure_that_is_not_known_to_be_safe_and_passing_is_not_tried_again(gw, monkeypatch, pauses, case):
    error, shape = NOT_TRIED_AGAIN[case]
    failing = FailingAppends(gw, monkeypatch, error, times=99)
    before = gw.store.dump()
    if shape.get("burst"):
        items = [dict(session_key=CHILD, kind="goal_changed", dedupe_key=shape["dedupe_key"], **EVENT),
                 dict(session_key=CHILD, kind="goal_changed", **EVENT)]
        assert gw.record_events(items) == [None, None]
    else:
        assert gw.record_event(CHILD, "goal_changed", **EVENT) is None
    assert failing.attempts == 1 and pauses == []
    assert gw.store.dump() == before


def test_a_conflict_inside_the_callers_own_transaction_is_not_tried_again(gw, monkeypatch, pauses):
    """Only the caller can run its whole transaction again."""
    failing = FailingAppends(gw, monkeypatch, StorageConflict("deadlock (injected)", retry_safe=True), times=99)
    with gw.transaction():
        assert gw.record_event(CHILD, "goal_changed", **EVENT) is None
    assert failing.attempts == 1 and pauses == []


def test_an_unknown_outcome_is_tried_again_when_every_event_has_a_dedupe_key(gw, monkeypatch, pauses):
    """R10: a commit that did happen is found again by the dedupe key, so nothing is recorded twice."""
    failing = FailingAppends(gw, monkeypatch, StorageUnavailable("connection lost (injected)"), times=1)
    before = gw.ops.state_version(CHILD)
    assert gw.record_event(CHILD, "goal_changed", dedupe_key="once", **EVENT) == before + 1
    assert failing.attempts == 2 and pauses == [0.05]


# -- the protocol's options -------------------------------------------------------------------


def test_the_protocol_options_have_their_documented_defaults(db_url):
    with Gateway.open(db_url) as gw:
        assert (gw.ops.retention_days, gw.ops.max_rows, gw.ops.wake_window) == (30, 50_000, 20.0)
        assert gw.ops.stats == {"append_failures": 0, "events_recorded": 0, "notices_enqueued": 0}
        assert gw.cluster.serves("agent:anyone:main"), "R19: every session is served by default"


def test_a_gateway_made_from_a_store_records_and_announces_new_sessions_by_default(db_url):
    """R27's two switches are on by default for ``Gateway(store)`` too, not only for ``open``."""
    with Gateway.open(db_url) as opened:
        gw = Gateway(opened.store, clock=lambda: 1_800_000_000.0)
        gw.create_session(MANAGER)
        gw.create_session(PEER)
        kinds = [e["kind"] for e in gw.session_status(PEER, changes_since=0)["stateChanges"]["events"]]
        assert kinds == ["created"]
        assert len(gw.pending_system_events(MANAGER)) == 1, "the agent's main session hears of PEER"


def test_a_gateway_made_from_a_store_refuses_an_unknown_option_by_name(db_url):
    with Gateway.open(db_url) as opened:
        with pytest.raises(TypeError) as refused:
            Gateway(opened.store, retention=30)  # type: ignore[call-arg]
        assert str(refused.value) == "unexpected keyword arguments ['retention']"


async def _coroutine_hook(watcher: str, reason: str) -> None: ...


@pytest.mark.parametrize("hook", [5, "print", _coroutine_hook], ids=["number", "string", "coroutine function"])
def test_an_on_wake_hook_that_is_not_a_plain_function_is_refused(db_url, hook):
    with pytest.raises(InvalidArgument) as refused:
        Gateway.open(db_url, on_wake=hook)
    assert refused.value.message == "on_wake must be a plain function (a coroutine function: use AsyncGateway.open)"


@pytest.mark.parametrize("days", [0, -1, True, "30", None], ids=repr)
def test_retention_days_must_be_a_positive_number(db_url, days):
    with pytest.raises(InvalidArgument) as refused:
        Gateway.open(db_url, retention_days=days)
    assert refused.value.message == "retention_days must be a positive number"


@pytest.mark.parametrize("rows", [-1, True, 1.5, "10", None], ids=repr)
def test_max_rows_must_be_a_non_negative_integer(db_url, rows):
    with pytest.raises(InvalidArgument) as refused:
        Gateway.open(db_url, max_rows=rows)
    assert refused.value.message == "max_rows must be a non-negative integer"


def test_the_smallest_accepted_retention_and_row_bound_are_kept(db_url):
    with Gateway.open(db_url, retention_days=0.5, max_rows=0, wake_window=5.0, on_wake=print, serve=["agent:a:*"]) as gw:
        assert (gw.ops.retention_days, gw.ops.max_rows, gw.ops.wake_window) == (0.5, 0, 5.0)
        assert gw.cluster.serves("agent:a:main") and not gw.cluster.serves("agent:b:main")


# -- record_event's messages name the argument -----------------------------------------------

FIELD_MESSAGES = {
    "summary too long": ({"summary": "x" * 201}, "summary is 201 characters; at most 200 allowed"),
    "actor id not a string": ({"actor_id": 5}, "actor id must be a string, not int"),
    "run id not a string": ({"run_id": 5}, "run id must be a string, not int"),
    "dedupe key on two lines": ({"dedupe_key": "a\nb"}, "dedupe key must be one line of printable text"),
}


@pytest.mark.parametrize("case", sorted(FIELD_MESSAGES))
def test_record_event_names_the_bad_argument_in_its_message(gw, case):
    overrides, message = FIELD_MESSAGES[case]
    before = gw.store.dump()
    with pytest.raises(InvalidArgument) as refused:
        gw.record_event(CHILD, "goal_changed", **{**EVENT, **overrides})
    assert refused.value.message == message
    assert gw.store.dump() == before


def test_record_event_names_unknown_and_missing_keywords(gw):
    with pytest.raises(TypeError) as unknown:
        gw.record_event(CHILD, "goal_changed", colour="red", **EVENT)  # type: ignore[call-arg]
    assert str(unknown.value) == "record_event() got unexpected keyword arguments ['colour']"
    with pytest.raises(TypeError) as missing:
        gw.record_event(CHILD, "goal_changed")  # type: ignore[call-arg]
    assert str(missing.value) == "record_event() missing required keyword arguments ['actor_type', 'summary']"
