"""The real Gateway on a real SQLite file, driven against the reference model.

Every rule applies one operation to both sides; one invariant per spec invariant (INV1-INV9,
INV12, LIV1) compares them. Restarts close and reopen the same file, losing the in-memory queue
and the owed wakes. Clock ticks (seconds, around the 20 s wake window) and advances (hours) fire
the owed wakes that fell due on both sides (``fire_due_wakes``, what the wake timer does).
"""

from __future__ import annotations

import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from hypothesis import note, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sessionstate import Gateway
from sessionstate.verify.refmodel import ACTORS, DAY, KINDS, NOTIFYING, Model, agent_of
from tests.backends import BACKENDS, Backend, stateful_test_cases

MAIN_KEYS = ("agent:a:main", "agent:a:peer", "agent:b:main")
CHILD_KEYS = ("agent:a:subagent:c1", "agent:a:subagent:c2", "agent:b:subagent:c3")
GLOBAL_KEY = "global"
MAX_ROWS = 12
SUMMARIES = ("human message via telegram", "goal updated", "run finished", "history compacted")


class GatewayVersusModel(RuleBasedStateMachine):
    backend: Backend = BACKENDS[0]  # stateful_test_cases binds one class per backend
    # R27's `created`, on as by Gateway.open's default. Its announcement line is not in the
    # model (it is in-memory only and opens no cursor transition; test_created.py pins it), so
    # the gateway runs without it.
    record_created = True

    def __init__(self) -> None:
        super().__init__()
        self.resources = ExitStack()
        self.url = self.resources.enter_context(self.backend.database())
        self.model = Model(max_rows=MAX_ROWS, record_created=self.record_created)
        self.wakes: list[tuple[str, str]] = []
        self.wakes_checked = 0  # inv12: the wakes before this index were checked against their step
        self.gw = self._open()
        self.seen_versions: dict[str, int] = {}
        self.pending_texts: dict[tuple[str, str], str] = {}
        self.opened_by_last_step: set[str] = set()
        self.last_step_quiet = False  # the last step was a self-caused or log-only event
        self.runs = 0

    def _open(self) -> Gateway:
        return Gateway.open(
            self.url,
            clock=lambda: self.model.now,
            on_wake=lambda w, r: self.wakes.append((w, r)),
            max_rows=MAX_ROWS,
            auto_prune=False,  # the machine prunes as a rule (R30's schedule: test_auto_prune.py)
            record_created=self.record_created,
            notify_on_create=False,
        )

    def teardown(self) -> None:
        self.gw.close()
        self.resources.close()

    def _all_pending(self) -> set[tuple[str, str]]:
        return {(w, text) for w in self.model.sessions for text in self.gw.pending_system_events(w)}

    def _step(self, action, *, quiet: bool = False) -> None:
        before = self._all_pending()
        action()
        after = self._all_pending()
        self.opened_by_last_step = {text for _, text in after - before}
        self.last_step_quiet = quiet

    def _live(self, keys) -> list[str]:
        return [k for k in keys if k in self.model.sessions]

    # -- rules ------------------------------------------------------------------------------

    @initialize()
    def start_with_a_manager(self) -> None:
        self.gw.create_session("agent:a:main")
        self.model.create("agent:a:main")

    @precondition(lambda self: any(k not in self.model.sessions for k in MAIN_KEYS + (GLOBAL_KEY,)))
    @rule(data=st.data())
    def create_session(self, data) -> None:
        key = data.draw(st.sampled_from([k for k in MAIN_KEYS + (GLOBAL_KEY,) if k not in self.model.sessions]))
        note(f"create {key}")
        self.gw.create_session(key, agent_id="a" if key == GLOBAL_KEY else None)
        self.model.create(key, agent="a" if key == GLOBAL_KEY else None)
        self._step(lambda: None)

    @precondition(lambda self: any(k not in self.model.sessions for k in CHILD_KEYS))
    @rule(data=st.data())
    def spawn_child(self, data) -> None:
        child = data.draw(st.sampled_from([k for k in CHILD_KEYS if k not in self.model.sessions]))
        parent = data.draw(st.sampled_from(sorted(self.model.sessions)))
        note(f"spawn {child} from {parent}")
        self.runs += 1
        run_id = f"run-{self.runs}"
        self._step(lambda: self.gw.create_session(child, kind="subagent", parent=parent, run_id=run_id))
        self.model.create(child, parent=parent, run_id=run_id, kind="subagent")

    @precondition(lambda self: bool(self.model.sessions))
    @rule(
        data=st.data(),
        kind=st.sampled_from(KINDS),
        actor_type=st.sampled_from(ACTORS),
        summary=st.sampled_from(SUMMARIES),
        dedupe=st.one_of(st.none(), st.sampled_from(["d1", "d2", "d3"])),
        skew=st.one_of(st.none(), st.floats(min_value=-3 * DAY, max_value=3 * DAY)),
    )
    def record_event(self, data, kind, actor_type, summary, dedupe, skew) -> None:
        target = data.draw(st.sampled_from(sorted(self.model.sessions)), label="target")
        actor_id = data.draw(st.one_of(st.none(), st.sampled_from(sorted(self.model.sessions))), label="actor")
        note(f"record {kind} on {target} by {actor_type} {actor_id} dedupe={dedupe} skew={skew}")
        payload = {"outcome": "timeout"} if kind == "run_failed" else None
        occurred = None if skew is None else self.model.now + skew
        watchers = {w for (w, t) in self.model.cursors if t == target}
        quiet = kind not in NOTIFYING or (watchers and watchers <= {actor_id})
        got: list[int | None] = []
        self._step(
            lambda: got.append(self.gw.record_event(
                target, kind, actor_type=actor_type, summary=summary, actor_id=actor_id,
                payload=payload, dedupe_key=dedupe, occurred_at=occurred)),
            quiet=bool(quiet),
        )
        want = self.model.record(target, kind, actor_type, actor_id, summary, payload, dedupe, occurred)
        assert got == [want]

    @precondition(lambda self: bool(self.model.sessions))
    @rule(data=st.data(), size=st.integers(min_value=2, max_value=4))
    def record_concurrently(self, data, size) -> None:
        """Group commit: ``size`` threads record at once, held until all are queued, so one
        transaction holds every event; the model applies them in the order of their sequences."""
        sessions = sorted(self.model.sessions)
        events = []
        for _ in range(size):
            kind = data.draw(st.sampled_from(KINDS), label="kind")
            events.append(dict(
                session_key=data.draw(st.sampled_from(sessions), label="target"), kind=kind,
                actor_type=data.draw(st.sampled_from(ACTORS), label="actor type"),
                actor_id=data.draw(st.one_of(st.none(), st.sampled_from(sessions)), label="actor"),
                summary=data.draw(st.sampled_from(SUMMARIES), label="summary"),
                payload={"outcome": "timeout"} if kind == "run_failed" else None,
            ))
        note(f"record concurrently {[(e['kind'], e['session_key'], e['actor_id']) for e in events]}")
        got: dict[int, int | None] = {}

        def record(index: int) -> None:
            got[index] = self.gw.record_event(**events[index])

        def batch() -> None:
            threads = [threading.Thread(target=record, args=(i,)) for i in range(size)]
            with self.gw.locked():
                for thread in threads:
                    thread.start()
                while self.gw.ops.diagnostics().group_queued < size:
                    time.sleep(0.0005)
            for thread in threads:
                thread.join(30)

        def quiet(e) -> bool:
            watchers = {w for (w, t) in self.model.cursors if t == e["session_key"]}
            return e["kind"] not in NOTIFYING or bool(watchers and watchers <= {e["actor_id"]})

        self._step(batch, quiet=all(quiet(e) for e in events))
        assert sorted(got) == list(range(size)) and None not in got.values()
        for index in sorted(got, key=lambda i: got[i]):  # type: ignore[arg-type, return-value]
            e = events[index]
            want = self.model.record(e["session_key"], e["kind"], e["actor_type"], e["actor_id"], e["summary"],
                                     e["payload"], None, None, flush_wakes=False)
            assert got[index] == want
        self.model.flush_wakes()  # one transaction's lines ask for one wake per watcher (R12)

    @precondition(lambda self: len(self.model.sessions) >= 2)
    @rule(data=st.data())
    def watch(self, data) -> None:
        watchers = [k for k in sorted(self.model.sessions) if agent_of(k) is not None]
        if not watchers:
            return
        watcher = data.draw(st.sampled_from(watchers))
        target = data.draw(st.sampled_from([k for k in sorted(self.model.sessions) if k != watcher]))
        ambient = data.draw(st.booleans(), label="ambient")
        note(f"watch {watcher} -> {target} ambient={ambient}")
        got: list[bool] = []
        self._step(lambda: got.append(self.gw.watch(watcher, target, ambient=ambient)))
        assert got == [self.model.watch(watcher, target, ambient=ambient)]

    @precondition(lambda self: bool(self.model.cursors))
    @rule(data=st.data())
    def unwatch(self, data) -> None:
        watcher, target = data.draw(st.sampled_from(sorted(self.model.cursors)))
        note(f"unwatch {watcher} -> {target}")
        got: list[bool] = []
        self._step(lambda: got.append(self.gw.unwatch(watcher, target)))
        assert got == [self.model.unwatch(watcher, target)]
        # The pair's notice is withdrawn: a later watch may owe one with another since.
        self.pending_texts.pop((watcher, target), None)

    @precondition(lambda self: bool(self.model.sessions))
    @rule(data=st.data())
    def drain(self, data) -> None:
        watcher = data.draw(st.sampled_from(sorted(self.model.sessions)))
        note(f"drain {watcher}")
        got: list[list[str]] = []
        self._step(lambda: got.append(self.gw.drain_system_events(watcher)))
        assert sorted(got[0]) == sorted(self.model.drain(watcher))
        for pair in [p for p in self.pending_texts if p[0] == watcher]:
            del self.pending_texts[pair]

    @precondition(lambda self: bool(self.model.sessions))
    @rule(data=st.data(), forget=st.booleans())
    def changes_since(self, data, forget) -> None:
        """INV9 at any point of a session's log. ``forget`` first drops the rows SQLite keeps
        for pages (store/event_rows.py), as their bound drops the oldest: the reads after it
        meet pages whose newest row is kept and whose older rows are not."""
        key = data.draw(st.sampled_from(sorted(self.model.sessions)))
        since = data.draw(st.integers(min_value=0, max_value=max(self.model.heads.values())), label="since")
        note(f"changesSince {key} {since}" + (" (kept rows dropped)" if forget else ""))
        kept = getattr(self.gw.store, "event_rows", None)  # SQLite's only
        if forget and kept is not None:
            kept.clear()
        assert self.gw.session_status(key, changes_since=since) == self.model.status(key, since)

    @rule()
    def restart(self) -> None:
        note("restart")
        self.gw.close()
        self.model.restart()
        self.gw = self._open()
        self.pending_texts.clear()
        self.opened_by_last_step = set()
        self.last_step_quiet = False

    @rule(hours=st.sampled_from([0.001, 1, 12, 24 * 10, 24 * 31]))
    def advance_clock(self, hours) -> None:
        note(f"advance clock {hours} h")
        self.model.now += hours * 3600
        self._fire_due_wakes()

    @rule(seconds=st.sampled_from([0.5, 5.0, 10.0, 19.5, 20.0, 25.0]))
    def tick(self, seconds) -> None:
        note(f"tick {seconds} s")
        self.model.now += seconds
        self._fire_due_wakes()

    def _fire_due_wakes(self) -> None:
        """What the wake timer does when the clock passes a due time (R12)."""
        self.gw.ops.fire_due_wakes()
        self.model.fire_due_wakes()

    @rule()
    def prune(self) -> None:
        note("prune")
        got = self.gw.prune()
        want = self.model.prune()
        assert (got["events"], got["cursors"]) == (want["events"], want["cursors"])
        self.pending_texts = {p: t for p, t in self.pending_texts.items() if p in self.model.cursors}
        self.last_step_quiet = False

    @precondition(lambda self: bool(self.model.sessions))
    @rule(data=st.data())
    def reset(self, data) -> None:
        key = data.draw(st.sampled_from(sorted(self.model.sessions)))
        note(f"reset {key}")
        self._step(lambda: self.gw.ops.reset_session(key))
        self.model.reset(key)
        self.pending_texts = {p: t for p, t in self.pending_texts.items() if p[0] != key}

    @precondition(lambda self: len(self.model.sessions) >= 2)
    @rule(data=st.data())
    def delete(self, data) -> None:
        key = data.draw(st.sampled_from(sorted(self.model.sessions)))
        note(f"delete {key}")
        self._step(lambda: self.gw.ops.delete_session(key))
        self.model.delete(key)
        self.seen_versions.pop(key, None)
        self.pending_texts = {p: t for p, t in self.pending_texts.items() if key not in p}

    # -- invariants, one per spec invariant --------------------------------------------------

    @invariant()
    def inv1_ordered_positions(self) -> None:
        for (watcher, target), cursor in self.model.cursors.items():
            got = self.gw.ops.cursor_positions(watcher, target)
            assert got is not None and tuple(got) == cursor.positions(), (watcher, target, got, cursor)
            last_seen, notified, material = got
            assert last_seen <= notified <= material
            assert last_seen < notified or notified == material

    @invariant()
    def inv2_one_notice_per_pair(self) -> None:
        for watcher in self.model.sessions:
            targets = [t for t in self.gw.ops.queued_events(watcher) if t.target is not None]
            assert len(targets) == len({t.target for t in targets}), targets

    @invariant()
    def inv3_byte_stable_notice(self) -> None:
        for watcher in self.model.sessions:
            for entry in self.gw.ops.queued_events(watcher):
                if entry.target is None:
                    continue
                pair = (watcher, entry.target[0])
                assert self.pending_texts.setdefault(pair, entry.text) == entry.text, pair

    @invariant()
    def inv4_queue_matches_cursors(self) -> None:
        for watcher in self.model.sessions:
            assert sorted(self.gw.pending_system_events(watcher)) == sorted(self.model.pending(watcher))
        assert sorted(self.wakes) == sorted(self.model.wakes)  # order across watchers is free

    @invariant()
    def inv12_queue_only_pairs(self) -> None:
        for (watcher, target), cursor in self.model.cursors.items():
            got = self.gw.ops.cursor_positions(watcher, target)
            assert got is not None and (got.provenance == "ambient") == cursor.ambient, (watcher, target, got)
        # Only the wakes of the last step: an earlier wake may belong to an earlier cursor of
        # the same pair (spawn, then reset, then an ambient watch), and no step turns a pair
        # ambient and wakes it (a new ambient cursor is caught up). The model's own wakes
        # agree (inv4 compares the whole lists).
        ambient = {(w, f"session-state: {t}") for (w, t), c in self.model.cursors.items() if c.ambient}
        assert not ambient & set(self.wakes[self.wakes_checked:]), (ambient, self.wakes[self.wakes_checked:])
        self.wakes_checked = len(self.wakes)

    @invariant()
    def liv1_no_stranded_notice(self) -> None:
        """LIV1: a main-style watcher holding a line that entered after its last wake is owed
        a wake, due when its window ends and not yet passed; the gateway owes what the model
        owes."""
        for watcher in self.model.sessions:
            if agent_of(watcher) and ":subagent:" not in watcher and self.model.holds_new_lines(watcher):
                assert watcher in self.model.owed_wakes, watcher
                due = self.model.owed_wakes[watcher][0]
                assert self.model.now < due <= self.model.last_wake[watcher] + 20.0, (watcher, due)
        assert self.gw.ops.diagnostics().owed_wakes == {w: due for w, (due, _) in self.model.owed_wakes.items()}

    @invariant()
    def inv5_no_self_or_log_only_notices(self) -> None:
        if self.last_step_quiet:
            assert not self.opened_by_last_step, self.opened_by_last_step

    @invariant()
    def inv6_nothing_uncovered(self) -> None:
        assert self.model.uncovered() == []
        for (watcher, target), cursor in self.model.cursors.items():
            positions = self.gw.ops.cursor_positions(watcher, target)
            owed = positions is not None and positions.material > positions.last_seen
            queued = any(e.target and e.target[0] == target for e in self.gw.ops.queued_events(watcher))
            assert owed == queued, (watcher, target, positions)

    @invariant()
    def inv7_monotonic_heads(self) -> None:
        for key in self.model.sessions:
            version = self.gw.ops.state_version(key)
            assert version == self.model.heads[key]
            assert version >= self.seen_versions.get(key, 0)
            self.seen_versions[key] = version
            retained = [e.seq for e in self.model.events if e.session == key]
            assert all(seq <= version for seq in retained)

    @invariant()
    def inv8_exact_history_gap(self) -> None:
        for key in self.model.sessions:
            for since in {0, self.model.pruned[key], max(self.model.pruned[key] - 1, 0)}:
                got = self.gw.session_status(key, changes_since=since)["stateChanges"]["historyGap"]
                assert got == (since < self.model.pruned[key])

    @invariant()
    def inv9_exact_delta(self) -> None:
        for key in self.model.sessions:
            candidates = {0, self.model.heads[key]} | {c.last_seen for (w, t), c in self.model.cursors.items() if t == key}
            for since in candidates:
                assert self.gw.session_status(key, changes_since=since) == self.model.status(key, since)
            assert self.gw.session_status(key) == self.model.status(key, None)


globals().update(stateful_test_cases(GatewayVersusModel, "GatewayVersusModel"))


class TracedGatewayVersusModel(GatewayVersusModel):
    """The same run with the protocol trace on (and `created` recorded, R27); at the end the
    trace must replay clean."""

    def _open(self) -> Gateway:
        if not hasattr(self, "trace_file"):
            self.trace_file = Path(self.resources.enter_context(tempfile.TemporaryDirectory())) / "trace.jsonl"
        return Gateway.open(
            self.url,
            clock=lambda: self.model.now,
            on_wake=lambda w, r: self.wakes.append((w, r)),
            max_rows=MAX_ROWS,
            auto_prune=False,  # the machine prunes as a rule (R30's schedule: test_auto_prune.py)
            trace=self.trace_file,
            record_created=self.record_created,
            notify_on_create=False,
        )

    def teardown(self) -> None:
        from sessionstate.verify.trace_check import TraceChecker
        from sessionstate.verify.trace_read import read_trace

        self.gw.close()
        try:
            summary = TraceChecker().run([read_trace(self.trace_file)])
            assert summary.gateways, "the trace recorded no gateway"
        finally:
            self.resources.close()


for _name, _case in stateful_test_cases(TracedGatewayVersusModel, "TracedGatewayVersusModel").items():
    _case.settings = settings(_case.settings, max_examples=25)
    globals()[_name] = _case
