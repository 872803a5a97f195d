"""The drain reads the watcher's pending cursor records once, inside its transaction, however
many pairs it acknowledges: the acknowledgements fire on the positions of that one read (no
``store.cursor`` per drained pair). Counted with SQLite's statement trace
(``store.trace_statements``, which only the SQLite store has)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessionstate import Gateway

WATCHER = "agent:main:main"


def owe_notices(gw: Gateway, pairs: int) -> list[str]:
    """``pairs`` targets watched by WATCHER, each changed by a human once: one notice each."""
    # main sessions of other agents: no R27 announcement joins the watcher's notices
    targets = [f"agent:peer{i}:main" for i in range(pairs)]
    gw.create_session(WATCHER)
    for target in targets:
        gw.create_session(target)
        gw.watch(WATCHER, target)
        gw.record_event(target, "human_direct_message", actor_type="human", summary="typed upstream")
    return targets


def transaction_of(statements: list[str]) -> list[str]:
    begin = statements.index("BEGIN IMMEDIATE")
    return statements[begin: statements.index("COMMIT", begin) + 1]


def selects(statements: list[str]) -> list[str]:
    return [s for s in statements if s.startswith("SELECT")]


def cursor_reads(statements: list[str]) -> list[str]:
    return [s for s in selects(statements) if "session_watch_cursors" in s]


def caught_up(gw: Gateway, targets: list[str]) -> bool:
    positions = [gw.ops.cursor_positions(WATCHER, t) for t in targets]
    return all(p is not None and p.last_seen == p.notified for p in positions)


@pytest.mark.parametrize("pairs", [1, 6])
def test_a_drain_of_queued_notices_reads_the_cursors_once(tmp_path: Path, pairs: int) -> None:
    with Gateway.open(str(tmp_path / "state.db")) as gw:
        targets = owe_notices(gw, pairs)
        assert len(gw.pending_system_events(WATCHER)) == pairs
        with gw.store.trace_statements() as statements:
            lines = gw.drain_system_events(WATCHER)
        assert len(lines) == pairs and caught_up(gw, targets)
    # A queued notice says the watcher owes: no read before the transaction, one inside it.
    assert transaction_of(statements) == statements
    assert len(selects(statements)) == 1, statements


@pytest.mark.parametrize("pairs", [1, 6])
def test_a_drain_of_notices_queued_elsewhere_reads_once_inside_its_transaction(tmp_path: Path, pairs: int) -> None:
    # serve=[]: this process queues nothing (R19), the durable cursors still decide (R21).
    with Gateway.open(str(tmp_path / "state.db"), serve=[]) as gw:
        targets = owe_notices(gw, pairs)
        assert gw.pending_system_events(WATCHER) == []
        with gw.store.trace_statements() as statements:
            lines = gw.drain_system_events(WATCHER)
        assert len(lines) == pairs and caught_up(gw, targets)
    # Before the transaction: does the session exist, does it owe anything (a watcher that
    # owes nothing takes no write lock); inside it one read, whatever the number of pairs.
    before = statements[: statements.index("BEGIN IMMEDIATE")]
    assert len(selects(before)) == len(before) == 2 and len(cursor_reads(before)) == 1, before
    assert len(selects(transaction_of(statements))) == 1, statements


def test_a_drain_that_owes_nothing_reads_once_and_writes_nothing(tmp_path: Path) -> None:
    with Gateway.open(str(tmp_path / "state.db")) as gw:
        gw.create_session(WATCHER)
        with gw.store.trace_statements() as statements:
            assert gw.drain_system_events(WATCHER) == []
    assert "BEGIN IMMEDIATE" not in statements and len(selects(statements)) == len(statements)
