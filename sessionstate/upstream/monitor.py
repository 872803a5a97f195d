"""The upstream monitor: checks linked, watched sessions and records direct human turns.

One ``tick`` reads the watched links, asks each link's provider for news since its marker
(provider I/O runs outside the gateway's lock), drops self-echoes, and then, under the lock and
in ONE transaction, compare-and-sets the link (generation + version) and records the
``human_direct_message`` events through the gateway's normal path (so watchers get their one
notice). A failed compare-and-set means a Continue, a drop or a session delete raced the check:
nothing of it lands. Recording failures roll the marker back too, so the next tick retries
(the dedupe key ``upstream:<session key>:<source16>:<activity id>``, ``dedupe.py``, absorbs
repeats).

Outcomes per link: ``found`` resets the miss count; ``missing`` counts a miss, and the third in
a row drops the link and records one ``upstream_missing`` (dedupe key per link generation);
``error`` (or a raising provider) is logged and counted, never a miss. One link failing never
stops the tick for the others.

Spec R28: a link whose session has an active run is skipped for the tick (the run's own turn is
writing that transcript: it is neither another actor's change nor a vanished source), and an
``upstream_missing`` whose append failed rolls the drop back with it, so the link stays one
miss short of the threshold and the next tick that misses again records it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from ..store import UpstreamLink
from .dedupe import activity_key, missing_key
from .echo import drop_self_echoes
from .linking import PRIME_MAX_ROUNDS, link_store, prime
from .providers.base import CheckStatus, UpstreamActivity, UpstreamProvider

if TYPE_CHECKING:
    from ..facade.gateway import Gateway

log = logging.getLogger("sessionstate.upstream")

DEFAULT_INTERVAL_SECONDS = 30.0
MISSES_BEFORE_DROP = 3

RecentUserMessages = Callable[[str], Sequence[str]]


@dataclass(slots=True)
class TickReport:
    """Counts of one tick (``UpstreamMonitor.totals`` sums them over all ticks)."""

    checked: int = 0  # links whose provider answered found or missing
    activities_recorded: int = 0  # new human_direct_message events
    echoes_suppressed: int = 0  # upstream user turns dropped as our own echo
    misses: int = 0
    missing_emitted: int = 0  # upstream_missing events (links dropped)
    errors: int = 0  # provider errors, raising providers, failed writes
    stale_writes: int = 0  # compare-and-set lost against a Continue, drop or delete
    primed: int = 0  # links whose marker reached the thread's end this tick
    skipped_running: int = 0  # links not checked: their session has an active run (R28)
    missing_deferred: int = 0  # upstream_missing appends that failed; retried next tick (R28)
    skipped_ambiguous: int = 0  # links not checked: their session key is linked under several agents

    def add(self, other: "TickReport") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


class _Stale(Exception):
    """The link changed since it was read: roll the transaction back."""


class _AppendFailed(Exception):
    """Recording ``upstream_missing`` failed (R15): roll the drop back, retry next tick."""


class UpstreamMonitor:
    """Interval monitor of adopted sessions; ``tick`` for tests, ``run`` or a thread for use."""

    def __init__(
        self,
        gw: "Gateway",
        providers: Mapping[str, UpstreamProvider],
        *,
        recent_user_messages: RecentUserMessages | None = None,
        interval: float = DEFAULT_INTERVAL_SECONDS,
        prime_rounds: int = PRIME_MAX_ROUNDS,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.gw = gw
        self.providers = providers
        # Default: the gateway's own transcript (its 10 latest user-role messages).
        self.recent_user_messages = recent_user_messages or gw.transcripts.recent_user_messages
        self.interval = interval
        self.prime_rounds = prime_rounds
        self.links = link_store(gw)
        self.totals = TickReport()
        self._tick_lock = threading.Lock()  # ticks never overlap (thread + manual calls)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # -- one tick -----------------------------------------------------------------------------

    def tick(self) -> TickReport:
        """Check every linked, watched session once; never raises."""
        report = TickReport()
        with self._tick_lock:
            try:
                with self.gw.locked():
                    links = self.links.watched()
                    agents = Counter(link.session_key for link in self.links.all())
                    running = {(r.child_key, r.child_agent_id) for r in self.gw.runs.active_runs()}
            except Exception:
                log.exception("upstream monitor: reading links failed")
                report.errors += 1
                links, agents = [], Counter()
            for link in links:
                if agents[link.session_key] > 1:  # one key linked under several agents: whose is it?
                    log.warning("upstream link %s is held by %d agents; not checked", link.session_key,
                                agents[link.session_key])
                    report.skipped_ambiguous += 1
                    continue
                if (link.session_key, link.agent_id) in running:  # R28: its own turn is writing
                    report.skipped_running += 1
                    continue
                try:
                    self._check(link, report)
                except Exception:  # isolation: log, count, go on with the next link
                    log.exception("upstream check of %s (%s %s) failed", link.session_key, link.provider, link.thread_id)
                    report.errors += 1
            self.totals.add(report)
        return report

    def _check(self, link: UpstreamLink, report: TickReport) -> None:
        provider = self.providers.get(link.provider)
        if provider is None:
            log.warning("no provider %r for %s; link kept", link.provider, link.session_key)
            report.errors += 1
            return
        if not link.primed:
            outcome = prime(provider, link.thread_id, link.marker, self.prime_rounds)
            status, marker, detail, done = outcome.status, outcome.marker, outcome.detail, outcome.done
            activities: list[UpstreamActivity] = []  # pre-adoption history is not activity
        else:
            result = provider.check(link.thread_id, link.marker)
            status, marker, detail, done = result.status, result.marker, result.detail, True
            activities = result.activities
        if status is CheckStatus.ERROR:
            log.warning("upstream %s %s: %s (not a miss)", link.provider, link.thread_id, detail)
            report.errors += 1
            self._write(link, report, lambda: self.links.note_error(link, self.gw.clock()))
            return
        report.checked += 1
        if status is CheckStatus.MISSING:
            self._missed(link, report)
            return
        if not done:
            # Still catching up with pre-adoption history: keep the progress, stay unprimed.
            self._write(link, report, lambda: self.links.advance(link, marker, self.gw.clock(), primed=False))
            return
        kept = activities
        if activities:
            kept = drop_self_echoes(activities, list(self.recent_user_messages(link.session_key)))
            report.echoes_suppressed += sum(a.turns for a in activities) - sum(a.turns for a in kept)
        recorded = self._write(link, report, lambda: self._advance(link, marker, kept))
        if recorded is not None:
            report.activities_recorded += recorded
            report.primed += not link.primed

    # -- writes (each one transaction under the gateway lock) ----------------------------------

    def _write(self, link: UpstreamLink, report: TickReport, body: Callable[[], Any]) -> Any:
        """Run ``body`` in one transaction and return its result; ``False`` from it means the
        compare-and-set was lost: rolled back, counted, ``None`` returned."""
        try:
            with self.gw.transaction():
                result = body()
                if result is False:
                    raise _Stale
                return result
        except _Stale:
            log.info("upstream link %s generation %d changed during the check; write dropped",
                     link.session_key, link.generation)
            report.stale_writes += 1
            return None

    def _advance(self, link: UpstreamLink, marker: str | None, kept: list[UpstreamActivity]) -> int | bool:
        if not self.links.advance(link, marker, self.gw.clock()):
            return False
        return self._record_human(link, kept)

    def _record_human(self, link: UpstreamLink, kept: list[UpstreamActivity]) -> int:
        if not kept:
            return 0
        before = self.gw.ops.state_version(link.session_key, link.agent_id)
        sequences = self.gw.record_events([self._human_event(link, a) for a in kept])
        if any(s is None for s in sequences):
            raise RuntimeError("recording upstream activity failed; the marker stays for a retry")
        # Sequences are global and increasing: a dedupe hit returns an older one.
        return sum(1 for s in sequences if s is not None and s > before)

    def _human_event(self, link: UpstreamLink, activity: UpstreamActivity) -> dict[str, Any]:
        if activity.burst_overflow:
            summary = f"{activity.turns} human messages via {link.provider} (burst overflowed the window)"
        else:
            summary = f"human message via {link.provider}"
        return {
            "session_key": link.session_key,
            "agent_id": link.agent_id,
            "kind": "human_direct_message",
            "actor_type": "human",
            "summary": summary,
            "dedupe_key": activity_key(link.session_key, link.provider, link.host, link.thread_id, activity.activity_id),
            "occurred_at": activity.occurred_at,
            "payload": {"provider": link.provider, "channel": link.provider,
                        "turns": activity.turns, "burstOverflow": activity.burst_overflow},
        }

    def _missed(self, link: UpstreamLink, report: TickReport) -> None:
        report.misses += 1
        if link.consecutive_misses + 1 < MISSES_BEFORE_DROP:
            self._write(link, report, lambda: self.links.miss(link, self.gw.clock()))
            return
        try:
            if self._write(link, report, lambda: self._drop_missing(link)) is not None:
                report.missing_emitted += 1
        except _AppendFailed:  # R28: rolled back with the drop; the miss count is still one short
            log.warning("upstream_missing for %s could not be recorded; retried at the next tick", link.session_key)
            report.errors += 1
            report.missing_deferred += 1

    def _drop_missing(self, link: UpstreamLink) -> bool:
        if not self.links.drop(link):
            return False
        sequence = self.gw.record_event(
            link.session_key, "upstream_missing", actor_type="system", agent_id=link.agent_id,
            summary=f"upstream {link.provider} session is gone; link dropped",
            dedupe_key=missing_key(link.session_key, link.provider, link.host, link.thread_id, link.generation),
            payload={"provider": link.provider},
        )
        if sequence is None:
            raise _AppendFailed
        return True

    # -- running ------------------------------------------------------------------------------

    async def run(self, stop_event: asyncio.Event) -> None:
        """Tick every ``interval`` seconds until ``stop_event`` is set (ticks run in a thread)."""
        while not stop_event.is_set():
            await asyncio.to_thread(self.tick)  # file and SQLite I/O must not block the loop
            try:
                await asyncio.wait_for(stop_event.wait(), timeout=self.interval)
            except TimeoutError:
                pass

    def start_background(self) -> None:
        """Tick on a daemon thread until ``stop``; for embedders without an event loop."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="upstream-monitor", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self.interval)
