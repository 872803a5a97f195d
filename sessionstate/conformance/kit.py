"""The conformance kit: an implementation behind an adapter, judged by the reference model.

One Hypothesis ``RuleBasedStateMachine`` applies each operation to the adapter and to
``verify.refmodel.Model`` (written from the spec alone; not this project's Gateway) and checks
the answers. A check that fails raises ``Breach`` naming the spec rule or invariant it breaks;
Hypothesis shrinks the run and the kit records the shortest one it found. The kit then runs
again with that rule *tolerated* (a run that breaks it stops being checked from that step on,
so one defect does not show up again under other names) to find the next, until a run passes
or ``max_findings`` are found. Rules marked ``DIFFERENCE`` are this project's choices where
another implementation may deliberately choose otherwise: breaking them is reported as a
difference, every other breach as a violation.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, note, settings, strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from ..verify.refmodel import ACTORS, DAY, Model, agent_of
from .protocol import Adapter

# The rules the kit checks, each with the words of spec/notice-protocol.md it holds the
# implementation to (tests/conformance/test_kit.py checks that every quote is in the spec).
RULES: dict[str, str] = {
    "R4": "Earlier history never produces a notice.",
    "R8": "Draining acknowledges only up to the old N; events that arrived between enqueue and drain reopen exactly one follow-up notice with `changesSince` = old N.",
    "R10": "An event with a dedupe key that is already in the log returns the existing sequence, bumps no head and fires no trigger.",
    "R11": "On open, every cursor with M > L gets `restart_sweep`, which re-materialises its notice.",
    "R12": "is woken through `on_wake(watcher, reason)` when a line for T enters its queue in a process that serves it, at most once per *wake window* per watcher",
    "R13": "Cursors whose row and target head were both last updated before the window fire `expire`.",
    "R13-schedule": "runs R13's pruning without being asked: once while it opens, before the startup sweep (R11)",
    "R14": "Resetting W fires `reset_watcher` on every cursor W holds (the targets' history stays) and clears W's queue.",
    "R24": "appends `human_direct_message` only when at least one cursor targets the session",
    "R27": "Creating a session appends a log-only `created` event (actor `system`,",
    "R27-announce": "Not for the main session itself, nor for a session whose parent is the main session",
    "INV2": "W's queue holds at most one notice for T.",
    "INV4": "A pair has a queued notice if and only if its state is `notice_pending` or `pending_with_more`, and that notice says `changesSince` L.",
    "INV7": "A session's state version never decreases while the session exists, pruning included",
    "INV8": "`historyGap` is true exactly when `changesSince` < `pruned_max_sequence`",
    "INV9": "`changesSince N` returns the session's events with sequence > N, in ascending order, at most 200",
    "INV10": "a drain delivers at most one line per target",
}
DIFFERENCE = frozenset({"R13", "R13-schedule", "R27", "R27-announce"})
# Rules the kit can look past once found: the check is no longer applied (the `created` event's
# actor is not compared, announcement lines are not counted, wakes are not compared) and the run
# goes on being checked, instead of stopping there. A breach in nearly every run (an
# implementation whose `created` names another actor, or whose wakes come late) would otherwise
# hide everything after it.
SOFT = frozenset({"R27", "R27-announce", "R12"})

NOTICE = re.compile(r'^Session "(?P<target>[^"]+)" changed \(other actor\)\. Reconcile before acting: '
                    r'session_status sessionKey "(?P=target)" changesSince (?P<since>\d+)\.$')
MAINS = ("agent:a:main", "agent:a:peer", "agent:b:main")
CHILDREN = ("agent:a:subagent:c1", "agent:a:subagent:c2", "agent:b:subagent:c3")
KINDS = ("human_direct_message", "goal_changed", "upstream_missing", "run_completed", "compacted")
START = 1_700_000_000.0


class Breach(Exception):
    def __init__(self, rule: str, detail: str, steps: list[str]) -> None:
        super().__init__(f"{rule}: {detail}")
        self.rule, self.detail, self.steps = rule, detail, steps


@dataclass
class Finding:
    rule: str
    detail: str
    steps: list[str]
    # The implementation's own documentation for the rule, when its adapter names it (hello's
    # ``claims``): ``{"source": ..., "quote": ...}``, so a finding is also held to its own words.
    claim: dict[str, str] | None = None

    @property
    def kind(self) -> str:
        return "difference" if self.rule in DIFFERENCE else "violation"

    @property
    def quote(self) -> str:
        return RULES.get(self.rule, "")


@dataclass
class Report:
    implementation: str
    findings: list[Finding] = field(default_factory=list)
    examples: int = 0

    @property
    def violations(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "violation"]

    @property
    def differences(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "difference"]

    def as_json(self) -> dict[str, Any]:
        return {"implementation": self.implementation, "examples": self.examples,
                "findings": [{"rule": f.rule, "kind": f.kind, "quote": f.quote, "detail": f.detail,
                              "steps": f.steps, **({"claim": f.claim} if f.claim else {})} for f in self.findings]}

    def text(self) -> str:
        out = [f"conformance of {self.implementation}: {len(self.violations)} violation(s), "
               f"{len(self.differences)} difference(s)"]
        for f in self.findings:
            out.append(f"\n{f.kind.upper()} of {f.rule}: {f.detail}")
            out.append(f"  spec/notice-protocol.md {f.rule}: \"{f.quote}\"")
            if f.claim:
                out.append(f"  its own docs ({f.claim.get('source', '?')}): \"{f.claim.get('quote', '')}\"")
            out.append(f"  shortest run found ({len(f.steps)} steps):")
            out.extend(f"    {i + 1}. {s}" for i, s in enumerate(f.steps))
        if not self.findings:
            out.append("every check held")
        return "\n".join(out)


def _notices(lines: list[str]) -> tuple[list[tuple[str, int, str]], list[str]]:
    """Split a queue's lines into notices (target, since, text) and other lines (announcements)."""
    notices, others = [], []
    for line in lines:
        m = NOTICE.match(line)
        if m:
            notices.append((m["target"], int(m["since"]), line))
        else:
            others.append(line)
    return notices, others


# The operations the kit's runs are made of; ``run(ops=...)`` draws from a subset (a search aimed
# at one area, or an implementation without, say, restarts).
OPERATIONS = ("create", "spawn", "record", "human", "watch", "drain", "restart", "clock", "prune", "reset", "delete")


def machine_for(adapter: Adapter, tolerated: frozenset[str], hello: dict[str, Any],
                ops: frozenset[str] = frozenset(OPERATIONS), dedupe_keys: bool = True) -> type[RuleBasedStateMachine]:
    announces = bool(hello.get("announces", False))
    enabled = ops

    class Conformance(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.model = Model(record_created=bool(hello.get("recordsCreated", False)))
            self.model.now = START
            adapter.call("fresh", now=START)
            self.steps: list[str] = []
            self.diverged = False
            self.announced: Counter[str] = Counter()  # main session -> announcement lines owed
            self.expired: set[tuple[str, str]] = set()
            # Pairs a prune found with the row but not the target head older than the window:
            # the spec keeps them (R13); an implementation expiring on the row's age drops them.
            self.row_aged: set[tuple[str, str]] = set()
            self.runs = 0

        # -- checking -----------------------------------------------------------------------

        def step(self, text: str) -> None:
            try:
                note(text)
            except InvalidArgument:  # replay(): a fixed run, outside a Hypothesis test
                pass
            self.steps.append(text)

        def breach(self, rule: str, detail: str) -> None:
            if self.diverged:
                return
            if rule in tolerated:  # found already: stop checking this run, so it is not found again
                self.diverged = rule not in SOFT
                return
            raise Breach(rule, detail, list(self.steps))

        def check(self, ok: bool, rule: str, detail: str) -> None:
            if not ok:
                self.breach(rule, detail)

        def call(self, op: str, **arguments: Any) -> dict[str, Any]:
            return adapter.call(op, **arguments)

        def live(self, keys: tuple[str, ...]) -> list[str]:
            return [k for k in keys if k in self.model.sessions]

        def compare_queue(self, watcher: str, got_lines: list[str], want_lines: list[str], rule: str) -> None:
            got, others = _notices(got_lines)
            targets = Counter(t for t, _, _ in got)
            dup = [t for t, n in targets.items() if n > 1]
            self.check(not dup, "INV10" if rule == "R8" else "INV2",
                       f"{watcher} got {len(got_lines)} lines, {targets[dup[0]] if dup else 0} notices for {dup[0] if dup else ''}: {got_lines}")
            want = sorted(want_lines)
            have = sorted(text for _, _, text in got)
            if have != want:
                wanted_targets = {m["target"] for m in map(NOTICE.match, want) if m}
                missing = sorted(wanted_targets - {t for t, _, _ in got})
                if missing and all((watcher, t) in self.row_aged for t in missing):
                    self.breach("R13", f"{watcher} gets no notice for {missing}: the implementation expired the pair on "
                                       "its row's age although the target changed within the window")
                extra = [(t, s) for t, s, text in got if text not in want]
                unknown = [(t, s) for t, s in extra if (watcher, t) not in self.model.cursors]
                if unknown and all((watcher, t) in self.expired for t, _ in unknown):
                    self.breach("R13", f"{watcher} still gets notices for {unknown}, a pair the retention window expired")
                elif unknown and any(s == 0 for _, s in unknown):
                    self.breach("R4", f"{watcher} got a notice from changesSince 0 for {unknown}, a pair it no longer holds: {got_lines}")
                self.breach(rule, f"{watcher}: implementation has {have}, the spec says {want}")
            if announces and rule in {"R8", "INV4"}:
                self.check(len(others) == self.announced[watcher], "R27-announce",
                           f"{watcher} holds {len(others)} announcement line(s), the spec gives {self.announced[watcher]}: {others}")

        def created(self, key: str, parent: str | None) -> None:
            agent = agent_of(key)
            main = f"agent:{agent}:main" if agent else None
            if main and main in self.model.sessions and key != main and parent != main:
                self.announced[main] += 1

        # -- rules --------------------------------------------------------------------------

        @initialize()
        def start(self) -> None:
            self.step("create agent:a:main")
            self.call("create", key="agent:a:main")
            self.model.create("agent:a:main")

        @precondition(lambda self: "create" in enabled and bool([k for k in MAINS if k not in self.model.sessions]))
        @rule(data=st.data())
        def create(self, data: st.DataObject) -> None:
            key = data.draw(st.sampled_from([k for k in MAINS if k not in self.model.sessions]))
            self.step(f"create {key}")
            self.call("create", key=key)
            self.created(key, None)
            self.model.create(key)

        @precondition(lambda self: "spawn" in enabled and bool([k for k in CHILDREN if k not in self.model.sessions]))
        @rule(data=st.data())
        def spawn(self, data: st.DataObject) -> None:
            child = data.draw(st.sampled_from([k for k in CHILDREN if k not in self.model.sessions]))
            parent = data.draw(st.sampled_from(sorted(self.model.sessions)))
            self.runs += 1
            self.step(f"spawn {child} from {parent} (run r{self.runs})")
            self.call("spawn", child=child, parent=parent, runId=f"r{self.runs}")
            self.created(child, parent)
            self.model.create(child, parent=parent, run_id=f"r{self.runs}", kind="subagent")

        @precondition(lambda self: "record" in enabled)
        @rule(data=st.data(), kind=st.sampled_from(KINDS), actor_type=st.sampled_from(ACTORS),
              dedupe=st.one_of(st.none(), st.sampled_from(["d1", "d2"])) if dedupe_keys else st.none())
        def record(self, data: st.DataObject, kind: str, actor_type: str, dedupe: str | None) -> None:
            session = data.draw(st.sampled_from(sorted(self.model.sessions)), label="session")
            actor = data.draw(st.one_of(st.none(), st.sampled_from(sorted(self.model.sessions))), label="actor")
            self.step(f"record {kind} on {session} by {actor_type} {actor or '-'}" + (f" dedupe {dedupe}" if dedupe else ""))
            got = self.call("record", session=session, kind=kind, actorType=actor_type, actorId=actor,
                            summary="conformance", dedupeKey=dedupe).get("sequence")
            repeat = dedupe is not None and any(e.dedupe_key == dedupe for e in self.model.events)
            want = self.model.record(session, kind, actor_type, actor, "conformance", None, dedupe)
            self.check(got == want, "R10" if repeat else "INV9", f"record returned {got}, the spec gives {want}")

        @precondition(lambda self: "human" in enabled)
        @rule(data=st.data())
        def human_turn(self, data: st.DataObject) -> None:
            session = data.draw(st.sampled_from(sorted(self.model.sessions)))
            self.step(f"human turn in {session}")
            got = self.call("human", session=session, text="a human turn").get("sequence")
            watched = any(t == session for (_, t) in self.model.cursors)
            want = self.model.record(session, "human_direct_message", "human", None, "human message") if watched else None
            if got is None and want is not None and all(p in self.row_aged for p in self.model.cursors if p[1] == session):
                self.breach("R13", f"a human turn in {session} is not recorded: the implementation expired its watchers' "
                                   "pairs on their rows' age although the session changed within the window")
            self.check(got == want, "R24", f"a human turn in {session} returned {got}, the spec gives {want}")

        @precondition(lambda self: "watch" in enabled and len(self.model.sessions) >= 2)
        @rule(data=st.data())
        def watch(self, data: st.DataObject) -> None:
            watcher = data.draw(st.sampled_from([k for k in sorted(self.model.sessions) if agent_of(k)]))
            target = data.draw(st.sampled_from([k for k in sorted(self.model.sessions) if k != watcher]))
            self.step(f"watch {target} from {watcher}")
            self.call("watch", watcher=watcher, target=target)
            self.model.watch(watcher, target)
            self.expired.discard((watcher, target))
            self.row_aged.discard((watcher, target))

        @precondition(lambda self: "drain" in enabled)
        @rule(data=st.data())
        def drain(self, data: st.DataObject) -> None:
            watcher = data.draw(st.sampled_from(sorted(self.model.sessions)))
            self.step(f"drain {watcher} (its turn)")
            got = self.call("drain", watcher=watcher)["lines"]
            want = self.model.drain(watcher)
            self.compare_queue(watcher, got, want, "R8")
            self.announced[watcher] = 0

        @precondition(lambda self: "restart" in enabled)
        @rule()
        def restart(self) -> None:
            self.step("restart")
            self.call("restart")
            self.model.restart()
            self.announced.clear()  # R27: announcements are not kept across a restart
            for watcher in sorted(self.model.sessions):
                self.compare_queue(watcher, self.call("pending", watcher=watcher)["lines"],
                                   self.model.pending(watcher), "R11")

        @precondition(lambda self: "clock" in enabled)
        @rule(seconds=st.sampled_from([1.0, 19.0, 25.0, 3600.0, 31 * DAY]))
        def clock(self, seconds: float) -> None:
            self.step(f"clock +{seconds:g} s")
            self.model.now += seconds
            self.call("clock", now=self.model.now)
            self.model.fire_due_wakes()

        @precondition(lambda self: "prune" in enabled)
        @rule()
        def prune(self) -> None:
            self.step("prune")
            before = set(self.model.cursors)
            cutoff = self.model.now - self.model.retention_days * DAY
            self.row_aged |= {pair for pair, c in self.model.cursors.items() if c.updated_at < cutoff}
            self.call("prune")
            self.model.prune()
            self.expired |= before - set(self.model.cursors)
            self.row_aged &= set(self.model.cursors)

        @precondition(lambda self: "reset" in enabled)
        @rule(data=st.data())
        def reset(self, data: st.DataObject) -> None:
            key = data.draw(st.sampled_from(sorted(self.model.sessions)))
            self.step(f"reset {key}")
            self.call("reset", session=key)
            self.model.reset(key)
            self.announced[key] = 0
            got = self.call("pending", watcher=key)["lines"]
            if "R27-announce" in tolerated:  # announcements known to differ: only notices are held to R14
                got = [text for _, _, text in _notices(got)[0]]
            self.check(not got, "R14", f"{key} still holds {got} after its reset")

        @precondition(lambda self: "delete" in enabled and len(self.model.sessions) >= 2)
        @rule(data=st.data())
        def delete(self, data: st.DataObject) -> None:
            key = data.draw(st.sampled_from(sorted(self.model.sessions)))
            self.step(f"delete {key}")
            self.call("delete", session=key)
            self.model.delete(key)
            self.announced.pop(key, None)

        # -- invariants ---------------------------------------------------------------------

        @invariant()
        def queues(self) -> None:
            for watcher in sorted(self.model.sessions):
                self.compare_queue(watcher, self.call("pending", watcher=watcher)["lines"],
                                   self.model.pending(watcher), "INV4")

        @invariant()
        def versions_and_deltas(self) -> None:
            for key in sorted(self.model.sessions):
                want = self.model.heads[key]
                got = self.call("version", session=key)["stateVersion"]
                self.check(got == want, "INV7", f"{key} is at version {got}, the spec gives {want}")
                for since in sorted({0, self.model.pruned.get(key, 0)}):
                    answer = self.call("changesSince", session=key, since=since)
                    status = self.model.status(key, since)["stateChanges"]
                    if answer["historyGap"] != status["historyGap"]:
                        if self.pruned_on_its_own(key, since, answer):
                            self.breach("R13-schedule", f"{key} changesSince {since}: the implementation pruned without being "
                                                        f"asked (historyGap {answer['historyGap']}, as a prune now gives)")
                        self.breach("INV8", f"{key} changesSince {since}: historyGap {answer['historyGap']}, "
                                            f"the spec gives {status['historyGap']}")
                    have = [(e["sequence"], e["kind"], self.actor_of(e)) for e in answer["events"]]
                    wanted = [(e["sequence"], e["kind"], self.actor_of(e)) for e in status["events"]]
                    if have != wanted:
                        off = set(have) ^ set(wanted)
                        rule_id = "R27" if all(kind == "created" for _, kind, _ in off) else "INV9"
                        if rule_id == "INV9" and self.pruned_on_its_own(key, since, answer):
                            self.breach("R13-schedule", f"{key} changesSince {since}: the implementation pruned without being "
                                                        f"asked (a prune now gives its {have}, historyGap {answer['historyGap']})")
                        self.breach(rule_id, f"{key} changesSince {since}: implementation gives {have}, the spec {wanted}")

        def actor_of(self, event: dict[str, Any]) -> str:
            # R27's actor, once found to differ, is not compared again (SOFT)
            return "-" if event["kind"] == "created" and "R27" in tolerated else str(event["actorType"])

        def pruned_on_its_own(self, key: str, since: int, answer: dict[str, Any]) -> bool:
            """Whether the answer is what the spec gives after a prune now that nobody asked for."""
            pruned = self.model.copy()
            pruned.prune()
            status = pruned.status(key, since)["stateChanges"]
            have = [(e["sequence"], e["kind"]) for e in answer["events"]]
            unpruned = self.model.status(key, since)["stateChanges"]
            return (have == [(e["sequence"], e["kind"]) for e in status["events"]]
                    and answer["historyGap"] == status["historyGap"]
                    and (len(have) < len(unpruned["events"]) or status["historyGap"] != unpruned["historyGap"]))

        @invariant()
        def wakes(self) -> None:
            if "R12" in tolerated:  # SOFT: the wakes are no longer compared
                self.model.wakes.clear()
                return
            got = sorted(w for w, _ in self.call("wakes")["wakes"])
            want = sorted(w for w, _ in self.model.wakes)
            self.model.wakes.clear()
            self.check(got == want, "R12", f"woken {got}, the spec wakes {want} at this moment")

    return Conformance


def run(adapter_command: list[str] | str | Adapter, *, examples: int = 60, steps: int = 25, max_findings: int = 8,
        seed: int | None = 0, ops: tuple[str, ...] | None = None, tolerate: frozenset[str] = frozenset(),
        shrink: bool = True, dedupe_keys: bool = True) -> Report:
    """Search for findings until a search passes or ``max_findings`` are found. ``ops``: the
    operations to draw from (default all of OPERATIONS); ``tolerate``: rules treated as found
    already (a search aimed past them); ``shrink=False``: report the first run found breaking a
    rule, not the shortest (shrinking replays hundreds of runs: minutes against a slow adapter);
    ``dedupe_keys=False``: records carry no dedupe key (a search aimed past R10)."""
    unknown = set(ops or ()) - set(OPERATIONS)
    if unknown:
        raise ValueError(f"unknown operations {sorted(unknown)}; the kit's are {OPERATIONS}")
    enabled = frozenset(ops or OPERATIONS)
    # An Adapter already running is used and left running (several runs share one slow start).
    adapter = adapter_command if isinstance(adapter_command, Adapter) else Adapter(adapter_command)
    try:
        hello = adapter.call("hello")
        report = Report(str(hello.get("implementation", adapter.command)))
        tolerated: frozenset[str] = frozenset(tolerate)
        while len(report.findings) < max_findings:
            machine = machine_for(adapter, tolerated, hello, enabled, dedupe_keys)
            machine.TestCase.settings = settings(
                max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
                derandomize=seed is not None, suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                print_blob=False, phases=[p for p in Phase if shrink or p is not Phase.shrink],
            )
            try:
                run_state_machine_as_test(machine, settings=machine.TestCase.settings)
            except Breach as breach:
                claim = (hello.get("claims") or {}).get(breach.rule)
                report.findings.append(Finding(breach.rule, breach.detail, breach.steps, claim if isinstance(claim, dict) else None))
                tolerated = tolerated | {breach.rule}
                continue
            break
        report.examples = examples
        return report
    finally:
        if adapter is not adapter_command:
            adapter.close()


class _Drawn:
    """The values a fixed run's step draws, in order (replay's stand-in for ``st.data()``)."""

    def __init__(self, values: list[Any]) -> None:
        self.values = list(values)

    def draw(self, strategy: Any, label: str | None = None) -> Any:
        return self.values.pop(0)


def replay(adapter: Adapter, script: list[tuple[str, dict[str, Any]]], *,
           tolerate: frozenset[str] = frozenset()) -> Finding | None:
    """One fixed run through the kit's checks: each step is a rule's name and its arguments, with
    ``data`` the list of values the rule draws (``("spawn", {"data": [child, parent]})``). The
    invariants are checked after every step, as in a search. Returns the first finding, or None
    when every check held. For a known result: a search's shrunk run, kept as a regression."""
    hello = adapter.call("hello")
    machine: Any = machine_for(adapter, frozenset(tolerate), hello)()
    checks = ("queues", "versions_and_deltas", "wakes")
    try:
        machine.start()
        for check in checks:
            getattr(machine, check)()
        for name, arguments in script:
            arguments = dict(arguments)
            if "data" in arguments:
                arguments["data"] = _Drawn(arguments["data"])
            getattr(machine, name)(**arguments)
            for check in checks:
                getattr(machine, check)()
    except Breach as breach:
        claim = (hello.get("claims") or {}).get(breach.rule)
        return Finding(breach.rule, breach.detail, breach.steps, claim if isinstance(claim, dict) else None)
    return None
