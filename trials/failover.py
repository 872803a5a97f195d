"""Failover trials on PostgreSQL: the primary is killed under load and its standby promoted.

A primary and a streaming standby (``pgpair.StreamingPair``, synchronous or asynchronous), two
writer processes and a pumped serving process (``failover_worker``), all on the libpq
multi-host URL (``host=PRIMARY,STANDBY&target_session_attrs=read-write``): every connection
the store opens after the crash, the serving process's listener included, lands on whichever
server takes writes. Mid-load an unknown commit outcome is injected (spec R29): a third
gateway, in this process, reaches the primary through ``pgproxy.CommitDroppingProxy``; its
drain's COMMIT reaches the primary, the standby flushes it, and then, before the answer comes
back, the primary is SIGKILLed. The standby is promoted ``pause`` seconds later; the injected
drain's resolution can only ask the promoted server (another timeline: the transaction id's
status is only *unknown*, so its commit witness decides; the standby had the commit, so it is
*committed* and the drain must return its lines). Every second trial injects a record instead
of a drain: a record writes no witness, so its own rows decide, looked for on the promoted
server; it must return its sequence, and its event must be there once, under that sequence.
The writers go on on the promoted server.

Then, with raw SQL on the promoted server:

- every acknowledged event is there, on its session, with its summary (synchronous standby:
  asserted; asynchronous: the lost ones are counted and their window measured, how long
  before the crash they were acknowledged);
- no sequence was acknowledged twice, none was reissued to another event, and the promoted
  server's sequence is past every acknowledged one (asynchronous: counted, not asserted);
- no notice was delivered twice (an episode twice), except once more for a line a drain
  returned when its commit answer was lost and stayed unknown (R29: at least once; counted;
  a synchronous standby allows none: with the drain's witness only a resolution that reached
  no server stays unknown);
- no notice was lost: every event the serving process's cursors acknowledged was shown to it
  by the reconciliation of a delivered notice (``session_status changesSince N``), the
  injected drain's pair included, and every pair is caught up.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from sessionstate.facade.gateway import Gateway
from .pgpair import StreamingPair
from .pgproxy import AFTER_COMMIT, CommitDroppingProxy
from .watched_load import (TARGETS, WATCHER, WORKER_SECONDS, Acknowledged, await_ready, finish, spawn, stop,
                           wait_caught_up, watch_targets)

INJECTED_WATCHER, INJECTED_TARGET = "agent:injected:main", "agent:injected-target:main"
INJECTED_RECORD = "injected record"  # the summary of the injected record's event
INJECTIONS = ("drain", "record")  # what the trials inject, in turn


@dataclass
class Observed:
    """What the trial read back: the writers' and the serving process's logs, and the
    promoted server's tables (raw SQL)."""

    acknowledged: list[Acknowledged]
    delivered: list[str]  # notice lines, in delivery order
    reconciled: dict[str, set[int]]  # per target: every sequence a reconciliation returned
    events: dict[int, tuple[str, str]]  # sequence -> (session key, summary)
    notifying: set[int]  # the sequences of the events whose kind notifies watchers
    cursors: dict[tuple[str, str], tuple[int, int, int]]  # (watcher, target) -> (L, N, M)
    heads: dict[str, int]  # session key -> last sequence
    next_sequence: int  # the promoted server's sequence position (last_value)
    uncertain: set[str] = field(default_factory=set)  # lines a drain returned on an unknown outcome


@dataclass
class Injected:
    """The injected unknown outcome: what the drain returned and what it owed, or what the
    record (``kind``) returned."""

    expected: list[str]
    returned: list[str] | None = None
    again: list[str] | None = None  # a later drain's lines
    outcome: str | None = None  # how the store resolved the lost answer
    errors: list[str] = field(default_factory=list)
    kind: str = "drain"
    sequence: int | None = None  # the injected record's


@dataclass
class FailoverReport:
    mode: str
    trials: int = 0
    acknowledged: int = 0
    delivered: int = 0
    lost: list[Acknowledged] = field(default_factory=list)  # acknowledged, not on the promoted server
    lost_before_kill_ms: list[float] = field(default_factory=list)  # per lost event: kill time - ack time
    reissued: list[str] = field(default_factory=list)
    injected_outcomes: list[str] = field(default_factory=list)
    resolutions: Counter[str] = field(default_factory=Counter)  # the workers' R29 resolutions
    # Notices delivered twice after the serving process resolved a drain's lost answer as
    # unknown (R29: at least once), reported, not failed.
    repeated: list[str] = field(default_factory=list)
    no_writes_seconds: list[float] = field(default_factory=list)  # the longest time without an acknowledged append
    feed_back_seconds: list[float] = field(default_factory=list)  # promotion -> first notice delivered after it
    lag_before_kill: list[dict[str, float | None]] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # seconds per phase, all trials
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def loss_window_ms(self) -> float | None:
        """How long before the crash the earliest lost event was acknowledged (None: none lost)."""
        return max(self.lost_before_kill_ms) if self.lost_before_kill_ms else None

    def summary(self) -> str:
        window = "none lost" if self.loss_window_ms is None else \
            f"{len(self.lost)} lost, acknowledged up to {self.loss_window_ms:.1f} ms before the kill"
        return (f"{self.trials} {self.mode} failover(s), {self.acknowledged} acknowledged appends ({window}),"
                f" {len(self.reissued)} sequences reissued, {self.delivered} notices delivered"
                f"{f' ({len(self.repeated)} twice after an unknown outcome)' if self.repeated else ''},"
                f" the workers' lost commit answers resolved {_counts(self.resolutions)}, injected unknown"
                f" outcome(s) resolved {', '.join(self.injected_outcomes) or '-'}; writes impossible"
                f" {_span(self.no_writes_seconds)} s, feed back {_span(self.feed_back_seconds)} s after promotion,"
                f" standby write lag under load {_lag(self.lag_before_kill)}, {self.seconds:.1f}s")


def longest_gap(times: list[float]) -> float:
    """The longest time between two consecutive acknowledgements (the writes' outage)."""
    ordered = sorted(times)
    return max((b - a for a, b in zip(ordered, ordered[1:])), default=0.0)


def _lag(samples: list[dict[str, float | None]]) -> str:
    writes = [s["write"] * 1000 for s in samples if s.get("write") is not None]  # type: ignore[operator]
    return f"{min(writes):.2f}-{max(writes):.2f} ms" if writes else "-"


def _counts(counts: Counter[str]) -> str:
    return ", ".join(f"{n} {name}" for name, n in sorted(counts.items()) if n) or "none"


def _span(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}" if values else "-"


# -- the checks (pure: the observations in, the findings out) ---------------------------------


def check_events(observed: Observed, *, synchronous: bool) -> tuple[list[str], list[Acknowledged], list[str]]:
    """(failures, lost, reissued): the acknowledged appends against the promoted server's log.
    Loss and reissue are failures with a synchronous standby, measurements otherwise."""
    failures: list[str] = []
    lost: list[Acknowledged] = []
    reissued: list[str] = []
    given = Counter(a.sequence for a in observed.acknowledged)
    failures += [f"sequence {s} was acknowledged {n} times" for s, n in sorted(given.items()) if n > 1]
    for ack in observed.acknowledged:
        found = observed.events.get(ack.sequence)
        if found is None:
            lost.append(ack)
        elif found != (ack.target, ack.summary):
            reissued.append(f"acknowledged sequence {ack.sequence} ({ack.target} {ack.summary}) is now {found}")
    top = max(given, default=0)
    if observed.next_sequence < top:
        reissued.append(f"the promoted server's sequence is at {observed.next_sequence}, below the acknowledged {top}:"
                        " it would issue acknowledged sequences again")
    if synchronous:
        failures += [f"acknowledged event {a.sequence} ({a.target} {a.summary}) is lost" for a in lost]
        failures += reissued
    return failures, lost, reissued


def repeated_notices(observed: Observed) -> list[str]:
    """The notices delivered more than once (an episode twice)."""
    return [f"notice delivered {n} times: {text}" for text, n in Counter(observed.delivered).items() if n > 1]


def allowed_repeats(observed: Observed) -> list[str]:
    """The repeats R29 allows: a line first returned by a drain whose commit answer was lost
    and stayed unknown, delivered once more (its commit had not reached the promoted server)."""
    counts = Counter(observed.delivered)
    return [f"notice delivered {n} times: {text}" for text, n in counts.items()
            if n == 2 and text in observed.uncertain]


def check_notices(observed: Observed, watcher: str, targets: Iterable[str]) -> list[str]:
    """No episode delivered twice, unless its first delivery came from a drain whose outcome
    stayed unknown (R29: at least once; see ``allowed_repeats``); every event the watcher's
    cursors acknowledged was shown to it by a delivered notice's reconciliation (LIV2); every
    pair caught up with its head."""
    allowed = set(allowed_repeats(observed))
    failures = [text for text in repeated_notices(observed) if text not in allowed]
    for target in targets:
        positions = observed.cursors.get((watcher, target))
        head = observed.heads.get(target)
        if positions is None or head is None:
            failures.append(f"no cursor or head for {watcher} -> {target} on the promoted server")
            continue
        if positions != (head, head, head):
            failures.append(f"{watcher} -> {target} is not caught up: (L, N, M) = {positions}, head {head}")
        last_seen = positions[0]
        unseen = sorted(s for s, (key, _) in observed.events.items()
                        if key == target and s <= last_seen and s in observed.notifying
                        and s not in observed.reconciled.get(target, set()))
        if unseen:
            failures.append(f"{len(unseen)} event(s) on {target} acknowledged by {watcher}'s cursor (L = {last_seen})"
                            f" never shown to it by a delivered notice: {unseen[:10]} (a notice lost)")
    return failures


def check_injected(injected: Injected, observed: Observed) -> list[str]:
    """The injected unknown outcome: a drain's lines returned once and its pair acknowledged; a
    record's sequence returned and its event on the promoted server once, under it."""
    failures = list(injected.errors)
    if injected.kind == "record":
        stored = sorted(s for s, (session, summary) in observed.events.items()
                        if (session, summary) == (INJECTED_TARGET, INJECTED_RECORD))
        if injected.sequence is None:
            failures.append("the record whose commit answer was lost returned None (R29: its own rows decide)")
        if stored != ([] if injected.sequence is None else [injected.sequence]):
            failures.append(f"the injected record is stored as {stored}, acknowledged as {injected.sequence}")
        return failures
    if injected.returned != injected.expected:
        failures.append(f"the drain whose commit answer was lost returned {injected.returned!r},"
                        f" owed {injected.expected!r} (a notice lost to an unknown outcome)")
    if injected.again:
        failures.append(f"a later drain delivered the injected pair again: {injected.again!r}")
    positions = observed.cursors.get((INJECTED_WATCHER, INJECTED_TARGET))
    head = observed.heads.get(INJECTED_TARGET)
    if positions is None or head is None or positions != (head, head, head):
        failures.append(f"the injected pair is not acknowledged on the promoted server: {positions}, head {head}")
    return failures


# -- the trial --------------------------------------------------------------------------------


def _finish(child: subprocess.Popen[str], role: str, resolutions: Counter[str]) -> list[str]:
    """Stop a worker; what it reported if it failed; its R29 resolutions (its last line) counted."""
    failures, out = finish(child, role)
    lines = out.strip().splitlines()
    if not failures:
        resolutions.update(json.loads(lines[-1]) if lines else {})
    return failures


def read_server(url_dir: Path, dbname: str = "postgres") -> tuple[dict, set, dict, dict, int]:
    """(events, notifying sequences, cursors, heads, sequence position) with raw SQL on the
    server whose socket is in ``url_dir``."""
    import psycopg

    from sessionstate.statemachine.table import NOTIFYING_KINDS

    with psycopg.connect(host=str(url_dir), dbname=dbname, user="postgres", autocommit=True) as conn:
        rows = conn.execute("SELECT sequence, session_key, summary, kind FROM session_state_events").fetchall()
        events = {int(s): (k, m) for s, k, m, _ in rows}
        notifying = {int(s) for s, _, _, kind in rows if kind in NOTIFYING_KINDS}
        cursors = {(w, t): (int(a), int(b), int(c)) for w, t, a, b, c in conn.execute(
            "SELECT watcher_session_key, target_session_key, last_seen_sequence, notified_sequence,"
            " material_sequence FROM session_watch_cursors")}
        heads = {k: int(v) for k, v in conn.execute("SELECT session_key, last_sequence FROM session_state_heads")}
        row = conn.execute("SELECT last_value FROM session_state_events_sequence_seq").fetchone()
    return events, notifying, cursors, heads, int(row[0]) if row else 0


def _read_logs(acknowledged_log: Path, serving_log: Path) -> tuple[list[Acknowledged], list[str], dict[str, set[int]],
                                                                     list[float], set[str]]:
    acknowledged = [Acknowledged.parse(line) for line in acknowledged_log.read_text(encoding="utf-8").splitlines()]
    delivered: list[str] = []
    delivered_at: list[float] = []
    reconciled: dict[str, set[int]] = defaultdict(set)
    uncertain: set[str] = set()
    for line in serving_log.read_text(encoding="utf-8").splitlines():
        tag, first, rest = line.split("\t", 2)
        if tag in ("D", "U"):
            delivered_at.append(float(first))
            delivered.append(rest)
            if tag == "U" and rest not in delivered[:-1]:  # its first delivery was uncertain
                uncertain.add(rest)
        else:
            reconciled[first].update(int(s) for s in rest.split())
    return acknowledged, delivered, dict(reconciled), delivered_at, uncertain


def _inject(pair: StreamingPair, injector: Gateway, proxy: CommitDroppingProxy, injected: Injected,
            pause: float) -> None:
    """Drain the injected watcher (or record, ``injected.kind``) with its COMMIT's answer cut
    off and the primary killed in that moment (the proxy's ``on_drop``, set up by the caller,
    does the killing)."""
    proxy.arm(AFTER_COMMIT)
    before = dict(injector.store.commit_resolutions)  # type: ignore[attr-defined]
    try:
        if injected.kind == "record":
            injected.sequence = injector.record_event(INJECTED_TARGET, "goal_changed", actor_type="human",
                                                      summary=INJECTED_RECORD)
        else:
            injected.returned = injector.drain_system_events(INJECTED_WATCHER)
    except Exception as exc:  # the spec says both return: raising is a finding
        injected.errors.append(f"the injected {injected.kind} raised {type(exc).__name__}: {exc}")
    after = injector.store.commit_resolutions  # type: ignore[attr-defined]
    changed = [k for k, v in after.items() if v != before.get(k, 0)]
    injected.outcome = changed[0] if changed else "none"
    if proxy.dropped != 1:
        injected.errors.append(f"the proxy cut {proxy.dropped} COMMITs off, not 1")


def run_failover_trials(
    trials: int,
    mode: str = "sync",
    *,
    seed: int = 0,
    load_seconds: tuple[float, float] = (0.6, 1.2),
    pause: float = 0.5,
    progress: Callable[[int, int], object] | None = None,
    injections: Sequence[str] = INJECTIONS,
) -> FailoverReport:
    """``trials`` failovers, each on a fresh pair of servers under a fresh load; trial ``i``
    injects ``injections[i % len(injections)]`` (a drain or a record)."""
    if not injections or not set(injections) <= set(INJECTIONS):
        raise ValueError(f"injections are drains and records, not {injections!r}")
    started = time.monotonic()
    report = FailoverReport(mode)
    rng = random.Random(seed)
    for trial in range(trials):
        failures = _one_trial(mode, rng, load_seconds, pause, report, injections[trial % len(injections)])
        report.trials += 1
        report.failures += [f"trial {trial}: {f}" for f in failures]
        if progress is not None:
            progress(trial + 1, trials)
        if failures:
            break
    report.seconds = time.monotonic() - started
    return report


def _one_trial(mode: str, rng: random.Random, load_seconds: tuple[float, float], pause: float,
               report: FailoverReport, injection: str) -> list[str]:
    failures: list[str] = []
    mark = [time.monotonic()]

    def phase(name: str) -> None:
        now = time.monotonic()
        report.phases[name] += now - mark[0]
        mark[0] = now

    with tempfile.TemporaryDirectory(prefix="sessionstate-failover-") as tmp:
        acknowledged_log, serving_log = Path(tmp) / "acknowledged", Path(tmp) / "served"
        # Started first: their imports overlap the servers' start.
        serving = spawn("failover_worker", "serve", str(serving_log), WATCHER)
        writers = [spawn("failover_worker", "write", str(acknowledged_log), f"w{n}", str(rng.randrange(2**32)),
                         *TARGETS) for n in (1, 2)]
        try:
            with StreamingPair(mode) as pair:
                failures += _trial_on(pair, mode, rng, load_seconds, pause, report, phase,
                                      serving, writers, acknowledged_log, serving_log, injection)
        finally:
            for child in (serving, *writers):  # a closed stdin ends a worker at any stage
                if child.poll() is None:
                    try:
                        assert child.stdin is not None
                        child.stdin.close()
                        child.wait(timeout=WORKER_SECONDS)
                    except (OSError, subprocess.TimeoutExpired):
                        child.kill()
                        child.wait()
    phase("stop")
    return failures


def _trial_on(pair: StreamingPair, mode: str, rng: random.Random, load_seconds: tuple[float, float], pause: float,
              report: FailoverReport, phase: Callable[[str], None], serving: subprocess.Popen[str],
              writers: list[subprocess.Popen[str]], acknowledged_log: Path, serving_log: Path,
              injection: str) -> list[str]:
    failures: list[str] = []
    phase("servers")
    with Gateway.open(pair.url) as gw:
        watch_targets(gw)
    promote_errors: list[str] = []

    def fail_over() -> None:  # in the proxy's thread: the COMMIT is on the primary, its answer held
        try:
            pair.wait_standby_caught_up()  # the drain's commit is on the standby too
            pair.kill_primary()
            proxy.close()  # nothing reaches the dead primary through it any more
            threading.Timer(pause, promote).start()
        except Exception as exc:
            promote_errors.append(f"failing over: {exc}")

    def promote() -> None:
        try:
            pair.promote()
        except Exception as exc:
            promote_errors.append(f"promoting: {exc}")

    proxy = CommitDroppingProxy(str(pair.primary_dir), on_drop=fail_over)
    injected_url = (f"postgresql+psycopg://postgres@/postgres?host={proxy.directory},{pair.standby_dir}"
                    "&port=5432,5432&target_session_attrs=read-write")
    injector = Gateway.open(injected_url, serve=[INJECTED_WATCHER], record_created=False, notify_on_create=False)
    try:
        injector.create_session(INJECTED_WATCHER)
        injector.create_session(INJECTED_TARGET)
        injector.watch(INJECTED_WATCHER, INJECTED_TARGET)
        injector.record_event(INJECTED_TARGET, "human_direct_message", actor_type="human", summary="injected")
        injected = Injected(expected=injector.pending_system_events(INJECTED_WATCHER), kind=injection)
        if not injected.expected:
            failures.append("the injected watcher owes no notice before the drain")
        try:
            phase("setup")
            for child in (serving, *writers):
                await_ready(child, pair.url)
            phase("workers")
            time.sleep(rng.uniform(*load_seconds))
            report.lag_before_kill.append(pair.replication_lag())  # under load, just before
            _inject(pair, injector, proxy, injected, pause)
            if injection == "drain":
                injected.again = injector.drain_system_events(INJECTED_WATCHER)
            phase("failover")
            time.sleep(rng.uniform(*load_seconds))  # the writers go on on the promoted server
        finally:
            for writer in writers:  # all at once, then each one's end
                stop(writer)
            for n, writer in enumerate(writers, 1):
                failures += _finish(writer, f"writer {n}", report.resolutions)
            with Gateway.open(pair.url, serve=[]) as gw:
                wait_caught_up(gw, time.monotonic())  # check_notices says whether it did
            served: Counter[str] = Counter()
            failures += _finish(serving, "serving process", served)
            report.resolutions.update(served)
            phase("load")
    finally:
        injector.close()
        proxy.close()
    failures += promote_errors
    if pair.promoted_at is None:
        return failures + ["the standby was never promoted"]
    acknowledged, delivered, reconciled, delivered_at, uncertain = _read_logs(acknowledged_log, serving_log)
    events, notifying, cursors, heads, next_sequence = read_server(pair.standby_dir)
    observed = Observed(acknowledged, delivered, reconciled, events, notifying, cursors, heads, next_sequence,
                        uncertain)
    event_failures, lost, reissued = check_events(observed, synchronous=mode == "sync")
    failures += event_failures
    # A drain resolved as unknown returns its lines; if its commit never reached the promoted
    # server, the next drain repeats them: R29's at least once, counted, not failed. With the
    # drain's commit witness (R29) that takes a resolution that reached no server at all: a
    # drain killed between the primary's own flush and the standby's receipt, whose id the
    # promoted server issued again, is resolved as rolled back by its witness and runs again.
    failures += check_notices(observed, WATCHER, TARGETS)
    report.repeated += allowed_repeats(observed)
    if mode == "sync":  # the bound for a synchronous standby: no episode twice at all
        failures += [f"synchronous standby: {text}" for text in allowed_repeats(observed)]
    failures += check_injected(injected, observed)
    report.acknowledged += len(acknowledged)
    report.delivered += len(delivered)
    report.lost += lost
    report.reissued += reissued
    assert pair.killed_at is not None
    report.lost_before_kill_ms += [(pair.killed_at - a.at) * 1000 for a in lost]
    report.injected_outcomes.append(f"{injection} {injected.outcome or 'none'}")
    report.no_writes_seconds.append(longest_gap([a.at for a in acknowledged if a not in lost]))
    fed = [t for t in delivered_at if t > pair.promoted_at]
    if fed:
        report.feed_back_seconds.append(min(fed) - pair.promoted_at)
    phase("check")
    return failures


if __name__ == "__main__":  # pragma: no cover
    result = run_failover_trials(int(sys.argv[1]) if len(sys.argv) > 1 else 1,
                                 sys.argv[2] if len(sys.argv) > 2 else "sync")
    print(result.summary())
    print({name: round(seconds, 2) for name, seconds in result.phases.items()})
    print("\n".join(result.failures))
    sys.exit(0 if result.ok else 1)
