"""A rolled-back change never rides along with the next commit (R9, R22; issue 20).

Every promise about a rollback (nothing notified, nothing woken, nothing queued) is checked
here across the boundary that could carry it: a later commit from the same gateway, while
another gateway (its own connections, as another process has) listens through its change
feed. A rolled-back append whose event or cursor change stayed in the store's pending
notification, or whose notice stayed in an after-commit list, would surface with that commit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from typing import Any

import pytest

from sessionstate import Gateway
from sessionstate import notice_text

W, T, T2 = "agent:a:main", "agent:b:main", "agent:c:main"
# Each session logs its own `created` first (R27): W 1, T 2, T2 3; a watch made after them
# starts at its target's created.
SEED_T, SEED_T2 = 2, 3


class Boom(Exception):
    pass


def human(gw: Gateway, target: str, summary: str = "hi") -> int | None:
    return gw.record_event(target, "human_direct_message", actor_type="human", summary=summary)


def rolled_back_transaction(gw: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(Boom):
        with gw.transaction():
            assert human(gw, T) is not None
            raise Boom


def rolled_back_savepoint(gw: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    """The savepoint rolls back; the outer transaction commits an event on T2."""
    with gw.transaction():
        with pytest.raises(Boom):
            with gw.transaction():
                assert human(gw, T) is not None
                raise Boom
        assert human(gw, T2, "in the outer transaction") is not None


def failed_burst(gw: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    """A storage failure on the burst's second append rolls the first back (R15)."""
    from sessionstate.errors import StorageError

    original = gw.store.append_event
    calls: list[object] = []

    def fail_second(*args: object) -> object:
        calls.append(args)
        if len(calls) == 2:
            raise StorageError("the disk went away")
        return original(*args)

    monkeypatch.setattr(gw.store, "append_event", fail_second)
    original_many = gw.store.append_and_read

    def fail_after_the_first(rows: list[Any], watched: list[Any]) -> object:  # a burst appends as one call
        original_many(rows[:1], watched)
        raise StorageError("the disk went away")

    monkeypatch.setattr(gw.store, "append_and_read", fail_after_the_first)
    item = dict(session_key=T, kind="human_direct_message", actor_type="human", summary="lost")
    assert gw.record_events([item, item]) == [None, None]
    monkeypatch.undo()


ROLLBACKS: dict[str, Callable[[Gateway, pytest.MonkeyPatch], None]] = {
    "transaction": rolled_back_transaction,
    "savepoint": rolled_back_savepoint,
    "failed_burst": failed_burst,
}


@contextmanager
def world(url: str) -> Iterator[tuple[Gateway, Gateway, Gateway, list, list]]:
    """A recorder; a listener that serves W and sweeps what its feed reports; an observer
    whose feed the test reads directly."""
    with Gateway.open(url) as setup:
        for key in (W, T, T2):
            setup.create_session(key)
        setup.watch(W, T)
        setup.watch(W, T2)
    recorder_wakes: list = []
    listener_wakes: list = []
    with Gateway.open(url, on_wake=lambda w, r: recorder_wakes.append((w, r))) as recorder, \
            Gateway.open(url, on_wake=lambda w, r: listener_wakes.append((w, r))) as listener, \
            Gateway.open(url, serve=[]) as observer:
        for gateway in (listener, observer):
            with gateway.locked():
                gateway.cluster.register()  # its change feed is open from here on
        yield recorder, listener, observer, recorder_wakes, listener_wakes


@pytest.mark.parametrize("rollback", list(ROLLBACKS))
def test_a_rolled_back_change_never_rides_along_with_the_next_commit(db_url, monkeypatch, rollback):
    with world(db_url) as (recorder, listener, observer, recorder_wakes, listener_wakes):
        ROLLBACKS[rollback](recorder, monkeypatch)
        if rollback != "savepoint":  # the savepoint's outer transaction committed this already
            assert human(recorder, T2, "the later commit") is not None
        expected = [notice_text(T2, SEED_T2)]
        # Nothing queued for the rolled-back event, here or in the listener's incremental sweep.
        assert recorder.pending_system_events(W) == expected
        listener.cluster.sweep()
        assert listener.pending_system_events(W) == expected
        # Nothing notified: the feed's change set names the later commit's event alone.
        feed = observer.cluster.feed
        assert feed is not None
        with observer.locked():
            feed.sync()
            changes = feed.take()
        assert not changes.resync
        assert [key for key, _agent, _actor in changes.material] == [T2]
        # Nothing woken for the rolled-back target, in either gateway (one wake for the later
        # event: the durable slot of R23 holds the other gateway's back).
        assert recorder_wakes + listener_wakes == [(W, f"session-state: {T2}")]
        assert recorder.ops.cursor_positions(W, T) == (SEED_T,) * 3
        assert recorder.ops.state_version(T) == SEED_T  # its created only


def test_a_rolled_back_attach_leaves_the_claim_where_it_was(db_url):
    """The attach's in-memory claim rode along: after its transaction rolled back, the
    gateway went on serving the watcher (queueing its notices beside the claim's holder)."""
    with Gateway.open(db_url) as setup:
        for key in (W, T):
            setup.create_session(key)
        setup.watch(W, T)
    with Gateway.open(db_url, serve=[], pump=True) as holder, Gateway.open(db_url, serve=[], pump=True) as other:
        holder.cluster.attach(W)
        with pytest.raises(Boom):
            with other.transaction():
                other.cluster.attach(W)
                raise Boom
        assert other.cluster.attached() == []
        assert other.store.serving.claimant(W)[0] == holder.ops.diagnostics().server_id
        assert human(other, T, "the later commit") is not None
        holder.cluster.sweep()
        other.cluster.sweep()
        assert holder.pending_system_events(W) == [notice_text(T, SEED_T)]
        assert other.pending_system_events(W) == []
