"""The nemesis: every fault the system claims to survive, together, judged on the whole history.

Several gateway processes (``nemesis_worker``) share one database: a SQLite file, a throwaway
PostgreSQL server (``postgres``: restarted under load, reached through ``pgproxy``) or a
primary with a synchronous standby (``pgpair``: the same, plus one failover). A seeded
schedule (``make_schedule``) injects, overlapping: SIGKILL and restart of a worker, SIGSTOP
past its lease with another worker attaching its watchers meanwhile then SIGCONT (R20's
stalled server; stopped between its transactions, or anywhere: on SQLite a process stopped
inside a write transaction holds every other writer, so nobody can take over), a jump of a worker's clock, and on PostgreSQL an immediate server restart, a
cut of every connection, a refused reconnection, on SQLite a full disk (the database on a
tmpfs of its own, a ballast file taking its free space for a while), a COMMIT whose answer is lost (before or
after the server has it, on a drain's witnessed commit or any other), and a failover.

Then the faults stop and the run heals: stalled workers go on, dead ones are restarted, clocks
are set right, and the clients stop (only the agents' turns go on: a wake is followed by a
drain). Every pair must be caught up within LIV1's bound: the latest wake slot plus the wake
window, or the lease (a killed server's claims), whichever is later, then one more window (a
pair pending with more needs a follow-up episode, R8), plus ``HEAL_SLACK``.

The verdict (``nemesis_judge``) reads the clients' histories against the database read back
with raw SQL; on SQLite the workers' protocol traces, merged (spec 15.2), are replayed against
the spec (``TraceChecker``). A failure prints the schedule and the command that replays it.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import worker, worker_env
from .full_disk import fill, mount_tmpfs, unmount
from .nemesis_bugs import BUG_ENV
from .nemesis_judge import Durable, Verdict, check_claims, judge
from .nemesis_world import CHURN_PAIRS, SESSIONS, STABLE_PAIRS, own_watchers, worker_names

BACKENDS = ("sqlite", "postgres", "pgpair")
READY_SECONDS = 180.0  # bounds for a stuck process, not measurements (a stall holds SQLite's lock)
COMMAND_SECONDS = 60.0
PROBE_CALM_SECONDS = 2.5  # before R20's probe: a killed worker's restart is done when it starts
STALL_HOLD_SECONDS = 5.0
SQLITE_DISK_SIZE = "1g"  # a tmpfs takes memory only for what is written; a long run's file fits  # how long a quiet stall waits for its worker's turn between transactions
HEAL_SLACK = 3.0  # the pump's sweep, a turn's drain and LIV1's second, on a loaded machine
WITNESS = b"sessionstate_commit_witness"  # in a drain's (or an attach's) COMMIT message (R29)
FAULTS = {
    "sqlite": ("kill", "stall", "clock", "full"),
    "postgres": ("kill", "stall", "clock", "restart", "cut", "refuse", "lose-commit"),
    "pgpair": ("kill", "stall", "clock", "cut", "refuse", "lose-commit"),
}


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the load started
    kind: str
    worker: str | None = None
    seconds: float = 0.0  # how long it lasts (down, stalled, refused), or the clock's jump
    mode: str = ""  # lose-commit: before/after, drain/any; stall: quiet (between transactions)/anywhere/probe

    def describe(self) -> str:
        who = f" {self.worker}" if self.worker else ""
        extra = f" {self.mode}" if self.mode else ""
        amount = f" {self.seconds:+.1f}s" if self.kind == "clock" else f" {self.seconds:.1f}s" if self.seconds else ""
        return f"{self.at:6.1f}s {self.kind}{who}{extra}{amount}"


@dataclass
class Settings:
    backend: str = "sqlite"
    seconds: float = 20.0
    workers: int = 3
    lease: float = 3.0  # R20's lease for the workers (the product's is 15 s)
    heartbeat: float = 1.0  # R20's heartbeat (the product's is 5 s)
    window: float = 2.0  # R23's wake window (the product's default is 20 s)
    bug: str | None = None  # a seeded bug (nemesis_bugs), applied in every worker

    def worker_settings(self) -> dict[str, Any]:
        return {"lease": self.lease, "heartbeat": self.heartbeat, "window": self.window, "workers": self.workers}


@dataclass
class NemesisReport:
    seed: int
    settings: Settings
    schedule: list[Fault] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)  # executed, by kind
    skipped: Counter[str] = field(default_factory=Counter)  # not executed (the worker was not up)
    operations: Counter[str] = field(default_factory=Counter)
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    repeated_after_unknown: int = 0
    delivered: int = 0
    heal_seconds: float | None = None
    heal_bound: float | None = None
    resolutions: Counter[str] = field(default_factory=Counter)  # R29, from every life's history
    commits_cut: int = 0
    takeovers: int = 0  # watchers of a stalled worker attached by another meanwhile (R20)
    trace: str = "-"
    findings: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.findings

    def replay_command(self) -> str:
        s = self.settings
        command = (f"./dev trials --only nemesis --seed {self.seed} --nemesis-backend {s.backend}"
                   f" --nemesis-seconds {s.seconds:g} --nemesis-lease {s.lease:g}"
                   f" --nemesis-heartbeat {s.heartbeat:g} --nemesis-window {s.window:g}")
        return command + (f" --nemesis-bug {s.bug}" if s.bug else "")

    def summary(self) -> str:
        heal = "-" if self.heal_seconds is None else f"{self.heal_seconds:.2f}s (bound {self.heal_bound:.2f}s)"
        return (f"{self.settings.backend}, {self.settings.workers} gateway processes, {self.settings.seconds:g}s of faults:"
                f" {sum(self.operations.values())} operations, {sum(self.faults.values())} faults,"
                f" {self.acknowledged} acknowledged, {self.lost} lost, {self.duplicated} duplicated,"
                f" {self.delivered} notices delivered, healed in {heal}, trace {self.trace}, {self.seconds:.1f}s")

    def table(self) -> str:
        rows: list[tuple[str, str, Any]] = [("operations", k, n) for k, n in sorted(self.operations.items())]
        rows += [("faults", k, n) for k, n in sorted(self.faults.items())]
        rows += [("faults skipped", k, n) for k, n in sorted(self.skipped.items())]
        rows += [("R29 resolutions", k, n) for k, n in sorted(self.resolutions.items())]
        rows += [("totals", "COMMIT answers cut by the proxy", self.commits_cut),
                 ("totals", "stall takeovers (attached elsewhere)", self.takeovers),
                 ("totals", "acknowledged events", self.acknowledged), ("totals", "lost", self.lost),
                 ("totals", "duplicated", self.duplicated),
                 ("totals", "repeated after an unknown outcome (R29)", self.repeated_after_unknown),
                 ("totals", "notices delivered", self.delivered),
                 ("totals", "time to heal (s)", "-" if self.heal_seconds is None else f"{self.heal_seconds:.2f}"),
                 ("totals", "heal bound (s)", "-" if self.heal_bound is None else f"{self.heal_bound:.2f}")]
        width = max(len(f"{a}: {b}") for a, b, _ in rows)
        return "\n".join(f"  {f'{a}: {b}':<{width}}  {n}" for a, b, n in rows)

    def failure_text(self) -> str:
        schedule = "\n".join("    " + f.describe() for f in self.schedule)
        return ("\n".join(self.findings[:20]) + (f"\n... {len(self.findings) - 20} more" if len(self.findings) > 20 else "")
                + f"\n  schedule (seed {self.seed}):\n{schedule}\n  replay: {self.replay_command()}")


# -- the schedule -------------------------------------------------------------------------------


def make_schedule(seed: int, settings: Settings) -> list[Fault]:
    """The faults of a run, from its seed alone: each kind the backend offers, at least one
    kill (and on PostgreSQL a lost drain answer of each cut), random ones every ~1.5 s (half
    the lease, when longer), overlapping freely, and last R20's probe: a stall between the
    worker's transactions, after which no worker is killed or stalled any more, so the workers
    that took its watchers over still live when the run is judged (a stalled server taking
    back claims attached elsewhere shows as a claim held by the wrong live server)."""
    rng = random.Random(seed)
    names = worker_names(settings.workers)
    kinds = FAULTS[settings.backend]
    stall = settings.lease + 2 * settings.heartbeat + 1.0
    span = max(1.0, settings.seconds - stall - 1.0)  # every fault starts early enough to end in the run
    calm = max(0.5, span - PROBE_CALM_SECONDS)  # no kill or stall starts later than this

    def fault(kind: str, at: float, mode: str | None = None) -> Fault:
        who = rng.choice(names) if kind in ("kill", "stall", "clock") else None
        if kind == "kill":
            return Fault(at, kind, who, rng.uniform(0.2, 2.0))
        if kind == "stall":
            return Fault(at, kind, who, stall + rng.uniform(0, 1.0), mode or rng.choice(("quiet", "anywhere")))
        if kind == "clock":
            return Fault(at, kind, who, rng.choice((-1, 1)) * rng.uniform(0.5, 2 * settings.window))
        if kind == "refuse":
            return Fault(at, kind, None, rng.uniform(0.3, 1.5))
        if kind == "full":  # long enough for the WAL to need new space (it reuses its own first)
            return Fault(at, kind, None, rng.uniform(2.0, 4.0))
        if kind == "lose-commit":
            return Fault(at, kind, None, 0.0, mode or f"{rng.choice(('before', 'after'))} {rng.choice(('drain', 'any'))}")
        return Fault(at, kind)

    schedule = [fault("stall", span, "probe"), fault("kill", rng.uniform(0.5, calm))]
    if "full" in kinds:
        schedule.append(fault("full", rng.uniform(0.5, span)))
    if "lose-commit" in kinds:
        schedule += [fault("lose-commit", rng.uniform(0.5, span), "before drain"),
                     fault("lose-commit", rng.uniform(0.5, span), "after drain")]
    if settings.backend == "pgpair":
        schedule.append(Fault(rng.uniform(0.3, 0.7) * span, "failover"))
    gap = max(1.5, settings.lease / 2)  # a stall lasts about twice the lease: keep some time between them
    at = rng.uniform(0.5, 1.5)
    late = [k for k in kinds if k not in ("kill", "stall")]
    while at < span:
        schedule.append(fault(rng.choice(kinds if at < calm else late), at))
        at += rng.expovariate(1 / gap)
    return sorted(schedule, key=lambda f: f.at)


# -- the workers ----------------------------------------------------------------------------------


class Member:
    """One worker slot: its current process (life), its state and its answers."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.life = -1
        self.proc: subprocess.Popen[str] | None = None
        self.server: str | None = None
        self.state = "down"  # up, stalled, down
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.command_lock = threading.Lock()
        self.asked = 0  # the tag of the last command sent to this life
        self.offset = 0.0


class Cluster:
    def __init__(self, url: str, directory: Path, settings: Settings, seed: int, trace: bool) -> None:
        self.url, self.directory, self.settings, self.trace = url, directory, settings, trace
        self.rng = random.Random(seed ^ 0x5EED)
        self.members = {name: Member(name) for name in worker_names(settings.workers)}
        self.lock = threading.Lock()

    def start(self, name: str) -> None:
        member = self.members[name]
        member.life += 1
        env = worker_env()
        env.pop("SESSIONSTATE_TRACE", None)
        if self.trace:
            env["SESSIONSTATE_TRACE"] = str(self.directory / f"trace-{name}-{member.life}.jsonl")
        if self.settings.bug:
            env[BUG_ENV] = self.settings.bug
        member.lines = queue.Queue()
        member.proc = subprocess.Popen(
            worker("nemesis_worker", self.url, str(self.directory), name, str(member.life),
                   str(self.rng.randrange(2**32)), json.dumps(self.settings.worker_settings())),
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(self.directory / f"stderr-{name}-{member.life}.txt", "w"), text=True)
        threading.Thread(target=self._read, args=(member.proc, member.lines), daemon=True).start()
        line = self._answer(member, READY_SECONDS)
        if line is None or not line.startswith("ready "):
            raise RuntimeError(f"worker {name} (life {member.life}) did not start: {line!r}\n{self.stderr(member)}")
        member.server = line.split()[1]
        member.offset = 0.0
        with self.lock:
            member.state = "up"

    @staticmethod
    def _read(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.strip())
        lines.put(None)

    @staticmethod
    def _answer(member: Member, seconds: float) -> str | None:
        try:
            return member.lines.get(timeout=seconds)
        except queue.Empty:
            return None

    def stderr(self, member: Member) -> str:
        path = self.directory / f"stderr-{member.name}-{member.life}.txt"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def command(self, name: str, text: str, seconds: float = COMMAND_SECONDS) -> str | None:
        member = self.members[name]
        with member.command_lock:
            proc = member.proc
            if proc is None or proc.poll() is not None or proc.stdin is None:
                return None
            member.asked += 1
            tag = f"{member.asked} "
            try:
                proc.stdin.write(tag + text + "\n")
                proc.stdin.flush()
            except (OSError, ValueError):
                return None
            # A command that timed out answers late: its answer carries its own tag and is
            # passed over, never taken for a later command's.
            deadline = time.monotonic() + seconds
            while (line := self._answer(member, max(0.0, deadline - time.monotonic()))) is not None:
                if line.startswith(tag):
                    return line[len(tag):]
            return None

    def take(self, name: str, state: str) -> str | None:
        """Move a worker that is up to ``state`` (its fault's): ``name`` or, when it is not
        up, the next one that is; ``None`` when none is (the fault is skipped)."""
        names = list(self.members)
        with self.lock:
            for candidate in names[names.index(name):] + names[:names.index(name)]:
                if self.members[candidate].state == "up":
                    self.members[candidate].state = state
                    return candidate
            return None

    def others_up(self, name: str) -> list[str]:
        with self.lock:
            return [n for n, m in self.members.items() if n != name and m.state == "up"]

    def signal(self, name: str, signum: int) -> None:
        proc = self.members[name].proc
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signum)

    def stop_all(self) -> list[str]:
        failures: list[str] = []
        for name, member in self.members.items():
            if member.state == "down" or member.proc is None:
                continue
            self.command(name, "stop")
            try:
                member.proc.wait(timeout=COMMAND_SECONDS)
            except subprocess.TimeoutExpired:
                member.proc.kill()
                member.proc.wait()
                failures.append(f"worker {name} did not stop: {self.stderr(member)}")
                continue
            if member.proc.returncode != 0:
                failures.append(f"worker {name} (life {member.life}) exited {member.proc.returncode}: {self.stderr(member)}")
        return failures

    def kill_all(self) -> None:
        for member in self.members.values():
            if member.proc is not None and member.proc.poll() is None:
                try:
                    os.kill(member.proc.pid, signal.SIGCONT)
                except OSError:
                    pass
                member.proc.kill()
                member.proc.wait()


# -- the databases ----------------------------------------------------------------------------------


class Database:
    """The backend's servers and URLs: ``url`` for the workers (through the proxy on
    PostgreSQL), ``direct`` for set-up, ``conninfo`` for the raw reads after the heal."""

    def __init__(self, backend: str, directory: Path, stack: ExitStack) -> None:
        self.backend = backend
        self.proxy: Any = None
        self.server: Any = None
        self.pair: Any = None
        self.disk: Path | None = None  # SQLite's own file system, where it could be mounted
        if backend == "sqlite":
            disk = directory / "disk"
            disk.mkdir()
            if mount_tmpfs(disk, SQLITE_DISK_SIZE):
                stack.callback(unmount, disk)
                self.disk = disk
            self.path = disk / "state.db"
            self.url = self.direct = f"sqlite:///{self.path}"
            return
        from .pgproxy import CommitDroppingProxy

        if backend == "postgres":
            from .pgserver import ThrowawayServer

            self.server = stack.enter_context(ThrowawayServer())
            self.proxy = CommitDroppingProxy(str(self.server.directory))
            self.direct = self.server.url
            self.url = f"postgresql+psycopg://postgres@/postgres?host={self.proxy.directory}"
            self.hosts = str(self.server.directory)
        else:
            from .pgpair import StreamingPair

            self.pair = stack.enter_context(StreamingPair("sync"))
            self.proxy = CommitDroppingProxy(str(self.pair.primary_dir))
            self.direct = self.pair.url
            self.url = (f"postgresql+psycopg://postgres@/postgres?host={self.proxy.directory},{self.pair.standby_dir}"
                        "&port=5432,5432&target_session_attrs=read-write")
            self.hosts = f"{self.pair.primary_dir},{self.pair.standby_dir}"
        stack.callback(self.proxy.close)

    def read(self, *queries: str) -> list[list[tuple[Any, ...]]]:
        """Raw SQL, never the gateway: the durable state as the database holds it."""
        if self.backend == "sqlite":
            import sqlite3

            lite = sqlite3.connect(self.path, timeout=30)
            try:
                return [lite.execute(q).fetchall() for q in queries]
            finally:
                lite.close()
        import psycopg

        deadline = time.monotonic() + 60
        while True:
            try:
                with psycopg.connect(f"host={self.hosts} dbname=postgres user=postgres"
                                     " target_session_attrs=read-write", autocommit=True) as conn:
                    return [conn.execute(q).fetchall() for q in queries]
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


EVENTS_SQL = "SELECT sequence, session_key, summary, kind, actor_id FROM session_state_events"
HEADS_SQL = "SELECT session_key, last_sequence, pruned_max_sequence FROM session_state_heads"
CURSORS_SQL = ("SELECT watcher_session_key, target_session_key, last_seen_sequence, notified_sequence,"
               " material_sequence FROM session_watch_cursors")
CLAIMS_SQL = "SELECT session_key, server_id FROM session_claims"
SERVERS_SQL = "SELECT server_id FROM session_servers"
SLOTS_SQL = "SELECT woken_at FROM session_wake_slots"
PENDING_SQL = ("SELECT watcher_session_key, target_session_key FROM session_watch_cursors"
               " WHERE notified_sequence > last_seen_sequence")


# -- the run ----------------------------------------------------------------------------------------


def run_nemesis(seed: int, settings: Settings, *, directory: Path | None = None, keep: Path | None = None,
                progress: Callable[[str], object] | None = None, schedule: list[Fault] | None = None) -> NemesisReport:
    """One nemesis run; ``keep``: copy the histories, traces and report there (CI artefacts)."""
    started = time.monotonic()
    report = NemesisReport(seed, settings)
    report.schedule = schedule if schedule is not None else make_schedule(seed, settings)
    with tempfile.TemporaryDirectory(prefix="sessionstate-nemesis-", dir=directory) as tmp, ExitStack() as stack:
        work = Path(tmp)
        try:
            _run(work, seed, settings, report, stack, progress)
        finally:
            report.seconds = time.monotonic() - started
            if keep is not None:
                _keep(work, keep, report)
    return report


def _run(work: Path, seed: int, settings: Settings, report: NemesisReport, stack: ExitStack,
         progress: Callable[[str], object] | None) -> None:
    db = Database(settings.backend, work, stack)
    seeds = _set_up(db, work)
    cluster = Cluster(db.url, work, settings, seed, trace=settings.backend == "sqlite")
    stack.callback(cluster.kill_all)
    starters = [threading.Thread(target=cluster.start, args=(n,)) for n in cluster.members]
    for t in starters:
        t.start()
    for t in starters:
        t.join()
    if any(m.state != "up" for m in cluster.members.values()):
        report.findings.append("SETUP: a worker did not start: " + "; ".join(
            cluster.stderr(m) for m in cluster.members.values() if m.state != "up"))
        return
    injector = Injector(cluster, db, settings, report)
    injector.play(report.schedule, settings.seconds, progress)
    _heal(cluster, db, settings, report)
    attached: dict[str, list[str]] = {}
    for name, member in cluster.members.items():
        answer = cluster.command(name, "state")
        if answer is None or not answer.startswith("{"):
            report.findings.append(f"HEAL: worker {name} does not answer after the heal: {answer!r}")
            continue
        state = json.loads(answer)
        attached[state["server"]] = state["attached"]
    claims, servers = db.read(CLAIMS_SQL, SERVERS_SQL)
    report.findings += [f"WORKER: {f}" for f in cluster.stop_all()]
    events, heads, cursors = db.read(EVENTS_SQL, HEADS_SQL, CURSORS_SQL)
    durable = Durable(
        events={int(s): (k, summary, kind, actor) for s, k, summary, kind, actor in events},
        heads={k: (int(last), int(pruned)) for k, last, pruned in heads},
        cursors={(w, t): (int(a), int(b), int(c)) for w, t, a, b, c in cursors},
        claims={k: s for k, s in claims}, servers={s for (s,) in servers},
    )
    (work / "durable.json").write_text(json.dumps({  # kept with the histories: the verdict can be read again
        "events": [[s, *v] for s, v in sorted(durable.events.items())], "heads": durable.heads,
        "cursors": [[w, t, *p] for (w, t), p in sorted(durable.cursors.items())], "claims": durable.claims,
        "servers": sorted(durable.servers), "seeds": [[w, t, l] for (w, t), l in sorted(seeds.items())],
        "attached": attached}), encoding="utf-8")
    histories = _histories(work)
    verdict = judge(histories, durable, seeds)
    check_claims(histories, durable, attached, verdict)
    _take(verdict, report)
    if db.proxy is not None:
        report.commits_cut = db.proxy.dropped
        resolved, killed = sum(report.resolutions.values()), report.faults["kill"]
        if resolved < report.commits_cut - killed:  # a killed worker may take one with it
            report.findings.append(f"R29: {report.commits_cut} COMMIT answers were lost, only {resolved} resolved")
    if settings.backend == "sqlite":
        report.trace = _replay(work, report, clock_skew(histories))


def _set_up(db: Database, work: Path) -> dict[tuple[str, str], int]:
    """The sessions and every pair, watched before the load; the stable pairs' seeds."""
    from sessionstate.facade.gateway import Gateway

    trace = work / "trace-setup.jsonl" if db.backend == "sqlite" else None
    with Gateway.open(db.direct, notify_on_create=False, trace=trace) as gw:
        for key in SESSIONS:
            gw.create_session(key)
        for watcher, target in STABLE_PAIRS + CHURN_PAIRS:
            gw.watch(watcher, target)
        seeds = {}
        for w, t in STABLE_PAIRS:
            positions = gw.ops.cursor_positions(w, t)
            assert positions is not None  # watched just above
            seeds[(w, t)] = positions.last_seen
        return seeds


class Injector:
    """Plays a schedule: each fault in a thread of its own at its time, so they overlap."""

    def __init__(self, cluster: Cluster, db: Database, settings: Settings, report: NemesisReport) -> None:
        self.cluster, self.db, self.settings, self.report = cluster, db, settings, report
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.server_lock = threading.Lock()  # one restart or failover at a time
        self.disk_lock = threading.Lock()

    def count(self, fault: Fault, done: bool) -> None:
        with self.lock:
            (self.report.faults if done else self.report.skipped)[fault.kind] += 1

    def play(self, schedule: list[Fault], seconds: float, progress: Callable[[str], object] | None) -> None:
        start = time.monotonic()
        next_line = 10.0
        for fault in schedule:
            while (wait := fault.at - (time.monotonic() - start)) > 0:
                time.sleep(min(wait, 1.0))
                next_line = self._progress(start, seconds, next_line, progress)
            thread = threading.Thread(target=self._inject, args=(fault,), daemon=True)
            thread.start()
            self.threads.append(thread)
        while (wait := seconds - (time.monotonic() - start)) > 0:
            time.sleep(min(wait, 1.0))
            next_line = self._progress(start, seconds, next_line, progress)
        for thread in self.threads:  # every fault ends by itself (a stall, a restart)
            thread.join(timeout=READY_SECONDS * 2)

    def _progress(self, start: float, seconds: float, next_line: float,
                  progress: Callable[[str], object] | None) -> float:
        elapsed = time.monotonic() - start
        if progress is None or elapsed < next_line:
            return next_line
        lines = sum(1 for p in self.cluster.directory.glob("history-*.jsonl") for _ in open(p, "rb"))
        with self.lock:
            faults = sum(self.report.faults.values())
        progress(f"nemesis: {elapsed:.0f}/{seconds:g}s, {lines} calls recorded, {faults} faults injected")
        return next_line + 10.0

    def _inject(self, fault: Fault) -> None:
        try:
            getattr(self, "_" + fault.kind.replace("-", "_"))(fault)
        except Exception as exc:  # a fault that cannot be injected is the trial's failure
            with self.lock:
                self.report.findings.append(f"INJECT: {fault.describe()}: {type(exc).__name__}: {exc}")

    def _kill(self, fault: Fault) -> None:
        assert fault.worker is not None
        name = self.cluster.take(fault.worker, "down")
        if name is None:
            return self.count(fault, False)
        self.cluster.signal(name, signal.SIGKILL)
        proc = self.cluster.members[name].proc
        assert proc is not None
        proc.wait()
        self.count(fault, True)
        time.sleep(fault.seconds)
        self.cluster.start(name)

    def _stall(self, fault: Fault) -> None:
        """R20: stopped past its lease; other workers attach its watchers meanwhile."""
        assert fault.worker is not None
        if fault.mode == "probe":  # R20's probe waits for the workers killed before it to be back
            deadline = time.monotonic() + READY_SECONDS
            while any(m.state != "up" for m in self.cluster.members.values()) and time.monotonic() < deadline:
                time.sleep(0.1)
        name = self.cluster.take(fault.worker, "stalled")
        if name is None:
            return self.count(fault, False)
        if not self.cluster.others_up(name):
            with self.cluster.lock:
                self.cluster.members[name].state = "up"
            return self.count(fault, False)
        began = time.monotonic()
        if fault.mode != "anywhere" and self.cluster.command(name, f"hold {STALL_HOLD_SECONDS:g}") != "held":
            with self.lock:  # its turn stayed busy (it waits on a lock itself): stopped where it is
                self.report.skipped["quiet stall (stopped anywhere)"] += 1
        self.cluster.signal(name, signal.SIGSTOP)
        self.count(fault, True)
        time.sleep(0.3)
        ends = began + fault.seconds - 0.5
        for watcher in own_watchers(name, self.settings.workers):
            if self._take_over(watcher, name, ends):
                with self.lock:
                    self.report.takeovers += 1
            else:
                with self.lock:
                    self.report.skipped["stall takeover"] += 1
        time.sleep(max(0.0, fault.seconds - (time.monotonic() - began)))
        self.cluster.signal(name, signal.SIGCONT)
        self.cluster.command(name, "release")
        with self.cluster.lock:
            self.cluster.members[name].state = "up"

    def _take_over(self, watcher: str, stalled: str, ends: float) -> bool:
        """Attach ``watcher`` on some other worker that is up, trying the next one (a taker
        killed, a store that failed the attach) until the stall is about to end."""
        while (left := ends - time.monotonic()) > 0:
            for taker in self.cluster.others_up(stalled):
                answer = self.cluster.command(taker, f"attach {watcher}", seconds=max(0.5, left))
                if answer is not None and answer.startswith("ok"):
                    return True
                if (left := ends - time.monotonic()) <= 0:
                    return False
            time.sleep(0.1)
        return False

    def _clock(self, fault: Fault) -> None:
        assert fault.worker is not None
        name = self.cluster.take(fault.worker, "jumping")
        if name is None:
            return self.count(fault, False)
        member = self.cluster.members[name]
        answer = self.cluster.command(name, f"clock {member.offset + fault.seconds}")
        if answer == "ok":
            member.offset += fault.seconds
        with self.cluster.lock:
            member.state = "up"
        self.count(fault, answer == "ok")

    def _full(self, fault: Fault) -> None:
        """A full disk under SQLite: writes fail with SQLITE_FULL (``StorageFull``) until the
        ballast goes; the workers' histories and traces are on another file system."""
        if self.db.disk is None:  # no tmpfs could be mounted (not root)
            return self.count(fault, False)
        with self.disk_lock:  # one full disk at a time: an overlapping one starts when it ends
            ballast = fill(self.db.disk)
            self.count(fault, True)
            time.sleep(fault.seconds)
            ballast.unlink()

    def _restart(self, fault: Fault) -> None:
        with self.server_lock:
            self.db.server.restart_immediately()
        self.count(fault, True)

    def _failover(self, fault: Fault) -> None:
        with self.server_lock:
            self.db.pair.wait_standby_caught_up()
            self.db.pair.kill_primary()
            time.sleep(0.3)
            self.db.pair.promote()
        self.count(fault, True)

    def _cut(self, fault: Fault) -> None:
        self.db.proxy.cut_all()
        self.count(fault, True)

    def _refuse(self, fault: Fault) -> None:
        self.db.proxy.refuse(fault.seconds)
        self.count(fault, True)

    def _lose_commit(self, fault: Fault) -> None:
        from .pgproxy import AFTER_COMMIT, BEFORE_COMMIT

        when, what = fault.mode.split()
        self.db.proxy.arm(AFTER_COMMIT if when == "after" else BEFORE_COMMIT, WITNESS if what == "drain" else None)
        self.count(fault, True)


def _heal(cluster: Cluster, db: Database, settings: Settings, report: NemesisReport) -> None:
    """The faults stop; every worker up with a right clock; the clients stop; then every pair
    must be caught up within LIV1's bound (the agents' turns drain when woken)."""
    if db.proxy is not None:
        db.proxy.disarm()
    for name, member in cluster.members.items():
        if member.state == "stalled":
            cluster.signal(name, signal.SIGCONT)
        if member.proc is None or member.proc.poll() is not None:
            cluster.start(name)
        with cluster.lock:
            member.state = "up"
        if member.offset:
            cluster.command(name, "clock 0")
            member.offset = 0.0
    for name in cluster.members:
        if cluster.command(name, "quiesce") != "ok":
            report.findings.append(f"HEAL: worker {name} did not quiesce")
    healed_from = time.time()
    (slots,) = db.read(SLOTS_SQL)
    latest_slot = max((float(s) for (s,) in slots), default=0.0)
    # A pair pending with more (R8) needs two episodes: the drain after the first wake opens the
    # follow-up, whose wake is owed a window later (LIV1: last wake + window).
    deadline = (max(healed_from + settings.lease + 2 * settings.heartbeat, latest_slot + settings.window)
                + settings.window + HEAL_SLACK)
    report.heal_bound = deadline - healed_from
    pending: list[tuple[Any, ...]] = []
    while True:
        (pending,) = db.read(PENDING_SQL)
        if not pending:
            report.heal_seconds = time.time() - healed_from
            return
        if time.time() > deadline:
            break
        time.sleep(0.1)
    report.findings.append(f"LIV1: {len(pending)} pair(s) still pending {report.heal_bound:.1f}s after the faults"
                           f" stopped (bound: the latest wake slot + window, or the lease, then a window for a"
                           f" follow-up episode): {sorted(pending)[:6]}")


def _histories(work: Path) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for path in sorted(work.glob("history-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                pass  # the line a SIGKILL cut: that call's answer never reached its client's record
    return entries


def _take(verdict: Verdict, report: NemesisReport) -> None:
    report.findings += verdict.findings
    report.operations.update(verdict.operations)
    report.acknowledged, report.lost, report.duplicated = verdict.acknowledged, verdict.lost, verdict.duplicated
    report.repeated_after_unknown, report.delivered = verdict.repeated_after_unknown, verdict.delivered
    report.resolutions.update(verdict.resolutions)


def clock_skew(histories: list[dict[str, Any]]) -> float:
    """The largest difference between two gateways' clocks the run made (its clock jumps)."""
    offsets = [0.0] + [float(e["offset"]) for e in histories if e["op"] == "clock"]
    return max(offsets) - min(offsets)


def _replay(work: Path, report: NemesisReport, skew: float) -> str:
    """Spec 15: the workers' traces merged and replayed against the spec."""
    from sessionstate.verify.trace_check import Violation
    from sessionstate.verify.trace_read import TraceFormatError, read_trace

    from .nemesis_trace import NemesisTraceChecker

    paths = sorted(work.glob("trace-*.jsonl"))
    try:
        files = [read_trace(p) for p in paths]
        summary = NemesisTraceChecker(skew).run(files)
    except TraceFormatError as exc:
        report.findings.append(f"T1: {exc}")
        return "format error"
    except Violation as violation:
        where = violation.line.where() if violation.line is not None else "-"
        report.findings.append(f"TRACE {violation.rule}: {violation.message} (at {Path(where).name})")
        return f"violation {violation.rule}"
    return (f"{summary.files} files, {summary.units} units, {summary.steps} steps replayed OK"
            f" ({len(summary.cut)} cut, {summary.resynced} pairs resynchronised)")


def _keep(work: Path, keep: Path, report: NemesisReport) -> None:
    import shutil

    keep.mkdir(parents=True, exist_ok=True)
    for path in work.iterdir():
        if path.suffix in (".jsonl", ".txt", ".json"):
            shutil.copy2(path, keep / path.name)
    summary = {"seed": report.seed, "settings": asdict(report.settings), "ok": report.ok,
               "schedule": [asdict(f) for f in report.schedule], "faults": dict(report.faults),
               "operations": dict(report.operations), "acknowledged": report.acknowledged, "lost": report.lost,
               "duplicated": report.duplicated, "takeovers": report.takeovers,
               "heal_seconds": report.heal_seconds, "heal_bound": report.heal_bound,
               "findings": report.findings, "replay": report.replay_command()}
    (keep / "report.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    result = run_nemesis(int(sys.argv[1]) if len(sys.argv) > 1 else 0,
                         Settings(backend=sys.argv[2] if len(sys.argv) > 2 else "sqlite"),
                         progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(result.summary())
    print(result.table())
    if not result.ok:
        print(result.failure_text())
    sys.exit(0 if result.ok else 1)
