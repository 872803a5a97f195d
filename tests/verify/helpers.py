"""What the verification tests share: a traced scenario that exercises every trigger and effect,
one-line trace corruptions, the SPIN check (skip, or fail where SPIN is required), and the
transition table with some transitions changed (a seeded bug)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import pytest

from sessionstate import Gateway
from sessionstate.statemachine.table import (
    TRANSITIONS,
    Transition,
)
from sessionstate.verify.spin import (
    spin_available,
)

MAIN = "agent:a:main"
PEER = "agent:a:peer"
CHILD = "agent:a:subagent:c1"
TARGET = "agent:b:main"
DAY = 86_400.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def traced_scenario(directory: Path) -> Path:
    """Seed, keep, freeze, raise_material, ack (with and without follow-up), sweep (restart and
    a manual sweep), a stale notice dropped (a second gateway unwatches), reset, prune with a
    pending cursor, expire and delete: every line kind of the trace, from an empty database."""
    trace = directory / "scenario.jsonl"
    url = f"sqlite:///{directory / 'scenario.db'}"
    clock = Clock()
    human = {"actor_type": "human", "summary": "a human message"}
    gw = Gateway.open(url, clock=clock, trace=trace)
    for key in (MAIN, PEER, TARGET):
        gw.create_session(key)
    gw.create_session(CHILD, parent=MAIN)  # seed at child_spawned
    gw.watch(MAIN, TARGET)
    gw.watch(PEER, TARGET)
    gw.record_event(TARGET, "human_direct_message", **human)  # freeze MAIN and PEER
    gw.record_event(TARGET, "goal_changed", **human)  # raise_material (derived)
    gw.record_event(TARGET, "goal_changed", actor_type="agent", actor_id=MAIN, summary="by main")
    gw.record_event(TARGET, "compacted", actor_type="system", summary="compacted")  # log-only
    gw.drain_system_events(MAIN)  # ack with a follow-up notice
    gw.drain_system_events(MAIN)  # ack to caught up
    gw.record_event(TARGET, "goal_changed", actor_type="agent", actor_id=MAIN, summary="self")  # self_event step
    gw.watch(MAIN, TARGET)  # seed on a watched pair: keep
    gw.close()
    gw = Gateway.open(url, clock=clock, trace=trace)  # restart: sweep PEER (pending_with_more)
    other = Gateway.open(url, clock=clock, trace=trace)  # a second gateway on the same file
    other.unwatch(PEER, TARGET)  # PEER's notice in gw is now stale
    other.close()
    gw.drain_system_events(PEER)  # R21: nothing pending, the stale notice is dropped
    gw.record_event(TARGET, "human_direct_message", **human)  # freeze MAIN again
    gw.ops.startup_sweep()  # a manual sweep: the same text again, deduplicated
    gw.watch(TARGET, CHILD)
    gw.record_event(CHILD, "human_direct_message", **human)  # freeze TARGET -> CHILD
    gw.record_event(CHILD, "goal_changed", **human)  # raise_material, then pruned away
    gw.ops.reset_session(MAIN)
    gw.close()
    gw = Gateway.open(url, clock=clock, trace=trace, max_rows=2)
    gw.prune()  # the row cap: writes the pending cursor's material watermark (R7)
    gw.watch(PEER, TARGET)
    clock.now += 40 * DAY
    gw.prune()  # the retention window: PEER -> TARGET expires
    gw.watch(MAIN, CHILD)
    gw.ops.delete_session(CHILD)  # removes MAIN -> CHILD and TARGET -> CHILD
    gw.watch(MAIN, TARGET)
    gw.watch(MAIN, PEER)
    gw.record_event(TARGET, "human_direct_message", **human)
    gw.record_event(PEER, "human_direct_message", **human)
    gw.drain_system_events(MAIN)  # one drain, two pending pairs (R21)
    gw.close()
    gw = Gateway.open(url, clock=clock, trace=trace, on_wake=lambda watcher, reason: None)
    gw.record_event(TARGET, "human_direct_message", **human)  # MAIN queued and woken
    gw.drain_system_events(MAIN)
    clock.now += 5
    gw.record_event(PEER, "human_direct_message", **human)  # inside MAIN's window: owed (R12)
    clock.now += 16
    gw.ops.fire_due_wakes()  # the window ended: the owed wake
    gw.close()
    return trace


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def find(lines: list[dict[str, Any]], predicate: Callable[[dict[str, Any]], bool], nth: int = 0) -> int:
    hits = [i for i, line in enumerate(lines) if predicate(line)]
    assert len(hits) > nth, "the scenario lacks the line the corruption needs"
    return hits[nth]


def step(trigger: str, effect: str | None = None, **fields: Any) -> Callable[[dict[str, Any]], bool]:
    def match(line: dict[str, Any]) -> bool:
        return (
            line["op"] == "step" and line["trigger"] == trigger and (effect is None or line["effect"] == effect)
            and all(line.get(k) == v for k, v in fields.items())
        )

    return match


def op(name: str, **fields: Any) -> Callable[[dict[str, Any]], bool]:
    return lambda line: line["op"] == name and all(line.get(k) == v for k, v in fields.items())


REQUIRE_SPIN_ENV = "SESSIONSTATE_REQUIRE_SPIN"


def need_spin() -> None:
    reason = spin_available()
    if reason is None:
        return
    if os.environ.get(REQUIRE_SPIN_ENV) == "1" or os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (required here: {REQUIRE_SPIN_ENV}=1 or CI=true)")
    pytest.skip(reason)


def table_with(changes: dict[tuple[str, str], tuple[str, str]]) -> tuple[Transition, ...]:
    return tuple(Transition(t.source, t.trigger, *changes[(t.source, t.trigger)])
                 if (t.source, t.trigger) in changes else t for t in TRANSITIONS)
