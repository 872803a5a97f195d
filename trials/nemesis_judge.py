"""The nemesis's verdict on a whole run: the clients' histories against the durable state.

Pure: the histories (``nemesis_worker``'s JSON lines, every life of every worker), the durable
state read back with raw SQL after the heal (``Durable``) and what the run knew (the stable
pairs' seeds) go in; findings come out, each naming the rule it breaks. The merged protocol
trace is replayed separately (``nemesis.py``, SQLite only: spec 15.2's merge needs SQLite's
serialised commits).
"""

from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from .nemesis_world import CHURN_SESSIONS, STABLE_PAIRS

_SINCE = re.compile(r'session_status sessionKey "(?P<target>[^"]+)" changesSince (?P<since>\d+)\.$')


@dataclass
class Durable:
    """The database after the heal, read with raw SQL (never through the gateway)."""

    events: dict[int, tuple[str, str, str, str | None]]  # sequence -> (session, summary, kind, actor)
    heads: dict[str, tuple[int, int]]  # session -> (last sequence, pruned watermark)
    cursors: dict[tuple[str, str], tuple[int, int, int]]  # (watcher, target) -> (L, N, M)
    claims: dict[str, str] = field(default_factory=dict)  # session -> server id (before the workers stop)
    servers: set[str] = field(default_factory=set)  # live server rows (before the workers stop)


@dataclass
class Verdict:
    findings: list[str] = field(default_factory=list)
    operations: Counter[str] = field(default_factory=Counter)
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0  # sequences acknowledged to two calls, plus notices delivered twice
    repeated_after_unknown: int = 0  # R29's at least once: counted, not failed
    resolutions: Counter[str] = field(default_factory=Counter)  # R29: every life's lost commit answers
    delivered: int = 0

    def fail(self, rule: str, message: str) -> None:
        self.findings.append(f"{rule}: {message}")


def operation_kind(entry: dict[str, Any]) -> str | None:
    op = entry["op"]
    if op == "record":
        events = entry["events"]
        shape = "lone" if len(events) == 1 else "batch"
        keyed = "dedupe" if all(e.get("dedupe_key") for e in events) else "plain"
        return f"record {shape} {keyed} ({entry.get('api', 'sync')})"
    if op == "drain":
        return "drain (turn)" if entry.get("turn") else "drain"
    if op in ("watch", "unwatch", "reset", "delete", "prune", "rolled_back", "attach", "wake", "clock"):
        return op
    return None


def judge(histories: list[dict[str, Any]], durable: Durable, seeds: dict[tuple[str, str], int]) -> Verdict:
    verdict = Verdict()
    entries = sorted(histories, key=lambda e: e["t"])
    for entry in entries:
        kind = operation_kind(entry)
        if kind is not None:
            verdict.operations[kind] += 1
        if entry["op"] == "resolved":
            verdict.resolutions.update(entry["outcomes"])
    deleted = _deleted_sessions(entries)
    _check_records(entries, durable, deleted, verdict)
    _check_rolled_back(entries, durable, verdict)
    _check_deliveries(entries, durable, deleted, seeds, verdict)
    _check_feed(entries, durable, deleted, verdict)
    return verdict


def _deleted_sessions(entries: list[dict[str, Any]]) -> set[str]:
    """Sessions deleted at some point (their events and cursors went with them, R14)."""
    return {e["session"] for e in entries if e["op"] in ("deleting", "delete")} | set(CHURN_SESSIONS)


def _pruned(durable: Durable, session: str, sequence: int) -> bool:
    head = durable.heads.get(session)
    return head is not None and sequence <= head[1]


def _check_records(entries: list[dict[str, Any]], durable: Durable, deleted: set[str], verdict: Verdict) -> None:
    """R15 (a recording call returns), R10, and no acknowledged event lost or issued twice."""
    given: dict[int, set[str]] = defaultdict(set)  # sequence -> the calls (summary, or dedupe key) given it
    by_key: dict[str, set[int]] = defaultdict(set)
    for entry in entries:
        if entry["op"] != "record":
            continue
        if "error" in entry:
            churn = any(e["session_key"] in deleted for e in entry["events"])
            if not (churn and entry["error"].startswith("UnknownSession")):  # bad input raises (R15)
                verdict.fail("R15", f"{entry['w']}.{entry['life']}: a recording call raised {entry['error']}")
            continue
        for event, sequence in zip(entry["events"], entry["seqs"]):
            if sequence is None:
                continue
            verdict.acknowledged += 1
            key = event.get("dedupe_key")
            given[sequence].add(key or event["summary"])
            if key:
                by_key[key].add(sequence)
            stored = durable.events.get(sequence)
            session = event["session_key"]
            if stored is None:
                if session in deleted or _pruned(durable, session, sequence):
                    continue
                verdict.lost += 1
                verdict.fail("LOST", f"acknowledged event {sequence} ({session}, {event['summary']}) is not in the log")
            elif stored[0] != session or (not key and stored[1] != event["summary"]):
                verdict.duplicated += 1
                verdict.fail("REISSUED", f"acknowledged sequence {sequence} ({session}, {event['summary']}) is {stored[:2]}")
    for sequence, calls in sorted(given.items()):
        if len(calls) > 1:
            verdict.duplicated += 1
            verdict.fail("TWICE", f"sequence {sequence} was acknowledged to {len(calls)} calls: {sorted(calls)[:4]}")
    for key, sequences in sorted(by_key.items()):
        if len(sequences) > 1:
            verdict.fail("R10", f"dedupe key {key} was given sequences {sorted(sequences)}")


def _check_rolled_back(entries: list[dict[str, Any]], durable: Durable, verdict: Verdict) -> None:
    """A unit of work that rolled back left no event (R9). By its summary: SQLite gives a
    rolled-back sequence again to the next event (its AUTOINCREMENT counter rolls back too)."""
    summaries = {summary for _, summary, _, _ in durable.events.values()}
    for entry in entries:
        if entry["op"] != "rolled_back":
            continue
        for event, sequence in zip(entry["events"], entry["seqs"]):
            if event["summary"] in summaries:
                verdict.fail("R9", f"a rolled-back event ({event['summary']}, sequence {sequence}) is in the log")


def _check_deliveries(entries: list[dict[str, Any]], durable: Durable, deleted: set[str],
                      seeds: dict[tuple[str, str], int], verdict: Verdict) -> None:
    """INV10/R21 (no episode twice), INV5 (no notice about the watcher's own act) and, on the
    stable pairs, LIV2 (every other actor's notifying event reached the watcher by a notice)."""
    by_target = _by_target(durable)
    counts: Counter[tuple[str, str]] = Counter()
    delivered_at: dict[tuple[str, str], list[float]] = defaultdict(list)
    deletions: dict[str, list[float]] = defaultdict(list)  # a target deleted: its next life's texts may repeat
    for entry in entries:
        if entry["op"] in ("deleting", "delete"):
            deletions[entry["session"]].append(entry["t"])
    uncertain: set[tuple[str, str]] = set()
    covered: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    unanswered_drains = _unanswered_drains(entries)
    recorded_at = {s: e["t"] for e in entries if e["op"] == "record" for s in e.get("seqs") or () if s is not None}
    for entry in entries:
        if entry["op"] != "drain" or "lines" not in entry:
            continue
        watcher = entry["watcher"]
        for line in entry["lines"]:
            verdict.delivered += 1
            delivered_at[(watcher, line)].append(entry["t"])
            if entry.get("tag") == "U":
                uncertain.add((watcher, line))
            found = _SINCE.search(line)
            if found is None:
                continue
            target, since = found["target"], int(found["since"])
            version = entry.get("versions", {}).get(target)
            covered[(watcher, target)].append((since, since if version is None else version))
            _check_not_self(watcher, target, since, durable, by_target, deleted, verdict)
    for (watcher, line), times in delivered_at.items():
        found = _SINCE.search(line)
        cuts = deletions.get(found["target"], []) if found is not None else []
        # One episode per life of the target: a session deleted and created again starts its
        # state version afresh, so its first episode's text may be an earlier life's (R14, R27).
        counts[(watcher, line)] = 1 + sum(1 for a, b in zip(times, times[1:]) if not any(a < t < b for t in cuts))
    for (watcher, line), n in sorted(counts.items()):
        if n == 1:
            continue
        if n == 2 and (watcher, line) in uncertain:
            verdict.repeated_after_unknown += 1
            continue
        verdict.duplicated += 1
        verdict.fail("INV10", f"{watcher} was delivered {n} times: {line}")
    for watcher, target in STABLE_PAIRS:
        cursor = durable.cursors.get((watcher, target))
        if cursor is None:
            verdict.fail("LIV2", f"the stable pair {watcher} -> {target} has no cursor")
            continue
        seed = seeds.get((watcher, target), 0)
        spans = _union(covered[(watcher, target)])
        starts = [since for since, _ in spans]
        missed = []
        for s, kind, actor in by_target.get(target, []):
            if not (seed < s <= cursor[0]) or kind not in _NOTIFYING or actor == watcher:
                continue
            i = bisect.bisect_left(starts, s) - 1  # the last span starting below s
            if i < 0 or s > spans[i][1]:
                missed.append(s)
        unanswered = unanswered_drains.get(watcher, [])
        # A drain begun and never answered (its worker killed between the commit and the answer,
        # or its outcome left unknown, R29) may have delivered, to a caller that is gone, any
        # event committed before its process ended: that delivery happened, its record did not.
        missed = [s for s in missed if not any(recorded_at.get(s, 0.0) <= bound for bound in unanswered)]
        if missed:
            verdict.fail("LIV2", f"{watcher} -> {target}: {len(missed)} event(s) acknowledged by its cursor"
                                 f" (L = {cursor[0]}) never reached it by a delivered notice: {missed[:8]}")


def _unanswered_drains(entries: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per watcher, for each drain that may have committed without its caller recording the
    lines, the latest time its commit can have happened: a drain begun (``draining``) in a
    life that ended before answering it, bounded by the next life's start (no later life:
    unbounded); a drain whose outcome stayed unknown, bounded by its answer."""
    lives: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for entry in entries:
        lives[(entry["w"], entry["life"])].append(entry)
    starts = {key: min(e["t"] for e in life) for key, life in lives.items()}
    found: dict[str, list[float]] = defaultdict(list)
    for (name, life), life_entries in lives.items():
        open_drains: Counter[str] = Counter()
        for entry in life_entries:
            if entry["op"] == "draining":
                open_drains[entry["watcher"]] += 1
            elif entry["op"] == "drain":
                open_drains[entry["watcher"]] -= 1
                if entry.get("error") == "CommitOutcomeUnknown":
                    found[entry["watcher"]].append(entry["t"])
        later = [t for (n, l), t in starts.items() if n == name and l > life]
        for watcher, n in open_drains.items():
            if n > 0:
                found[watcher].append(min(later) if later else float("inf"))
    return found


_NOTIFYING = frozenset({"human_direct_message", "goal_changed", "upstream_missing"})


def _by_target(durable: Durable) -> dict[str, list[tuple[int, str, str | None]]]:
    """Each session's events, (sequence, kind, actor), in sequence order."""
    by_target: dict[str, list[tuple[int, str, str | None]]] = defaultdict(list)
    for s, (session, _, kind, actor) in sorted(durable.events.items()):
        by_target[session].append((s, kind, actor))
    return by_target


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Half-open spans (since, upto] merged where they overlap or touch, in order."""
    merged: list[tuple[int, int]] = []
    for since, upto in sorted(spans):
        if merged and since <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], upto))
        else:
            merged.append((since, upto))
    return merged


def _check_not_self(watcher: str, target: str, since: int, durable: Durable,
                    by_target: dict[str, list[tuple[int, str, str | None]]], deleted: set[str],
                    verdict: Verdict) -> None:
    if target in deleted or _pruned(durable, target, since + 1):
        return
    events = by_target.get(target, [])
    later = events[bisect.bisect_right(events, (since, "\uffff", "\uffff")):]
    if not any(kind in _NOTIFYING and actor != watcher for _, kind, actor in later):
        verdict.fail("INV5", f"{watcher} was told about {target} changesSince {since}, but every later event there"
                             f" is its own or log-only: {later[:6]}")


def _check_feed(entries: list[dict[str, Any]], durable: Durable, deleted: set[str], verdict: Verdict) -> None:
    """R22: a change feed reports committed events only (PostgreSQL's NOTIFY goes with COMMIT)."""
    for entry in entries:
        if entry["op"] != "feed":
            continue
        for key, _agent, _actor, sequence in entry["events"]:
            stored = durable.events.get(sequence)
            if stored is not None and stored[0] == key:
                continue
            if key in deleted or _pruned(durable, key, sequence):
                continue
            verdict.fail("R22", f"{entry['w']}.{entry['life']}'s change feed reported event {sequence} on {key},"
                                " which was never committed")


def check_claims(entries: Iterable[dict[str, Any]], durable: Durable, attached: dict[str, list[str]],
                 verdict: Verdict) -> None:
    """R20 after the heal: each watcher's claim is its last attach's, if that server still
    lives (a stalled server that came back took back only what nobody attached since), and
    each live server holds in memory exactly the claims the database gives it."""
    last: dict[str, tuple[str, float]] = {}
    # Attaches begun after the last answered one and never answered (the worker killed or cut
    # off between its commit and its answer): each may have committed (R29), so its server may
    # hold the claim, or, once that server's lease ran out, nobody (R20 released it).
    unanswered: dict[str, set[str]] = defaultdict(set)
    for entry in sorted(entries, key=lambda e: e["t"]):
        if entry["op"] == "attaching":
            unanswered[entry["watcher"]].add(entry["server"])
        elif entry["op"] == "attach":
            unanswered[entry["watcher"]].discard(entry["server"])
            if "generation" in entry:
                last[entry["watcher"]] = (entry["server"], entry["t"])
    for watcher, (server, _) in sorted(last.items()):
        holder = durable.claims.get(watcher)
        perhaps = unanswered.get(watcher, set())
        if holder in perhaps or (holder is None and any(s not in durable.servers for s in perhaps)):
            continue
        if server in durable.servers and holder != server:
            verdict.fail("R20", f"{watcher} was last attached by server {server[:8]}, but its claim is held by"
                                f" {holder[:8] if holder else 'nobody'}")
    for server, keys in attached.items():
        held = sorted(k for k, s in durable.claims.items() if s == server)
        if sorted(keys) != held:
            verdict.fail("R20", f"server {server[:8]} serves {sorted(keys)} as claimed, the database gives it {held}")
