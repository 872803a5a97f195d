"""Metrics through the OpenTelemetry metrics API (the optional extra ``sessionstate[otel]``).

``instrument(gateway)`` reports one gateway's work to a ``MeterProvider`` (the global one by
default: a no-op until the application installs an SDK). The core never imports OpenTelemetry:
only this module does, and only when called.

Instruments (meter ``sessionstate``):

* counters ``sessionstate.events.recorded`` (attribute ``kind``), ``sessionstate.append.failures``
  (R15: a record that storage refused), ``sessionstate.notices.queued``,
  ``sessionstate.notices.drained``, ``sessionstate.wakes.sent`` (every ``on_wake`` call, at once
  or owed), and per watcher ``sessionstate.wakes.owed`` (a wake the window held back, R12),
  ``sessionstate.wakes.owed_fired`` (an owed wake that fired) and ``sessionstate.wakes.fired_late``
  (one that fired more than ``LATE_WAKE_SECONDS`` after its due time: LIV1's bound);
* histograms ``sessionstate.append.duration`` (seconds per ``record_event``/``record_events``
  call) and ``sessionstate.wakes.lateness`` (seconds from an owed wake's due time to its firing);
* observable gauges per watcher (attribute ``watcher``): ``sessionstate.watcher.lag`` (the most
  unread events of any target it watches) and ``sessionstate.watcher.lead`` (the fewest events
  that can still be recorded before the oldest unread event of one of its targets is pruned:
  Kafka's ``records-lead-min``; at 0 a ``historyGap`` is next), read from the database at each
  collection (operator.py).

The counts come through ``Gateway.ops.observe`` (``GatewayMetrics`` is the observer): nothing is
added to the record path of a gateway nobody observes, and ``detach()`` takes it all back
(services/observing.py).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .operator import all_pairs

if TYPE_CHECKING:
    from ..facade.gateway import Gateway

METER_NAME = "sessionstate"
# An owed wake that fires more than this after its due time is late: LIV1 allows 1 s (the wake
# timer re-reads the clock at least once a second, wake.TIMER_MAX_SLEEP_SECONDS).
LATE_WAKE_SECONDS = 1.0
# Lateness buckets in seconds: on time is well under a second, a stalled timer shows in tens.
LATENESS_BUCKETS = (0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)

_instrumented: "weakref.WeakKeyDictionary[Gateway, GatewayMetrics]" = weakref.WeakKeyDictionary()


def instrument(gateway: "Gateway", meter_provider: Any | None = None) -> "GatewayMetrics":
    """Start reporting ``gateway``'s metrics (once per gateway; a second call returns the first)."""
    existing = _instrumented.get(gateway)
    if existing is not None:
        return existing
    metrics = GatewayMetrics(gateway, meter_provider)
    _instrumented[gateway] = metrics
    return metrics


def metrics_of(gateway: "Gateway") -> "GatewayMetrics | None":
    """The gateway's metrics when ``instrument`` was called for it, else ``None``."""
    return _instrumented.get(gateway)


class GatewayMetrics:
    def __init__(self, gateway: "Gateway", meter_provider: Any | None = None) -> None:
        from opentelemetry import metrics as otel

        meter = (meter_provider or otel.get_meter_provider()).get_meter(METER_NAME)
        self.gateway = gateway
        self.events_recorded = meter.create_counter(
            "sessionstate.events.recorded", unit="{event}", description="events appended to the signal log")
        self.append_failures = meter.create_counter(
            "sessionstate.append.failures", unit="{event}", description="records refused by storage (R15)")
        self.notices_queued = meter.create_counter(
            "sessionstate.notices.queued", unit="{notice}", description="stale notices queued for a watcher's turn")
        self.notices_drained = meter.create_counter(
            "sessionstate.notices.drained", unit="{notice}", description="stale notices delivered by a drain")
        self.wakes_sent = meter.create_counter(
            "sessionstate.wakes.sent", unit="{wake}", description="on_wake calls made, at once or owed")
        self.wakes_owed = meter.create_counter(
            "sessionstate.wakes.owed", unit="{wake}", description="wakes held back by the window and owed later")
        self.wakes_owed_fired = meter.create_counter(
            "sessionstate.wakes.owed_fired", unit="{wake}", description="owed wakes that fired")
        self.wakes_fired_late = meter.create_counter(
            "sessionstate.wakes.fired_late", unit="{wake}",
            description=f"owed wakes that fired more than {LATE_WAKE_SECONDS:g} s after their due time")
        self.wake_lateness = meter.create_histogram(
            "sessionstate.wakes.lateness", unit="s", description="from an owed wake's due time to its firing",
            explicit_bucket_boundaries_advisory=list(LATENESS_BUCKETS))
        self.append_duration = meter.create_histogram(
            "sessionstate.append.duration", unit="s", description="time of one record_event/record_events call")
        meter.create_observable_gauge(
            "sessionstate.watcher.lag", callbacks=[self._observe_lag], unit="{event}",
            description="most unread events of any target the watcher watches")
        meter.create_observable_gauge(
            "sessionstate.watcher.lead", callbacks=[self._observe_lead], unit="{event}",
            description="fewest events before one of the watcher's unread events is pruned")
        self._detach: Callable[[], None] | None = gateway.ops.observe(self)

    # -- the wake coalescer's hooks (wake.py) ---------------------------------------------------

    def wake_owed(self, watcher: str, due: float) -> None:
        self.wakes_owed.add(1, {"watcher": watcher})

    def wake_fired(self, watcher: str, at: float, due: float | None) -> None:
        """An ``on_wake`` call at ``at``; ``due`` is the owed wake's due time (None: at once)."""
        self.wakes_sent.add(1)
        if due is None:
            return
        attributes = {"watcher": watcher}
        lateness = max(0.0, at - due)
        self.wakes_owed_fired.add(1, attributes)
        self.wake_lateness.record(lateness, attributes)
        if lateness > LATE_WAKE_SECONDS:
            self.wakes_fired_late.add(1, attributes)

    # -- the rest of what the gateway reports (services/observing.py's GatewayObserver) -------

    def recorded(self, kinds: Sequence[str], sequences: Sequence[int | None], seconds: float) -> None:
        self.append_duration.record(seconds)
        self._count_recorded(kinds, sequences)

    def spawned(self) -> None:  # the spawn edge's child_spawned event
        self.events_recorded.add(1, {"kind": "child_spawned"})

    def queued(self) -> None:
        self.notices_queued.add(1)

    def drained(self, count: int) -> None:
        self.notices_drained.add(count)

    def detach(self) -> None:
        """Stop counting: the gateway's own methods back (the gauges read nothing more)."""
        if self._detach is not None:
            self._detach()
            self._detach = None
        _instrumented.pop(self.gateway, None)

    def _count_recorded(self, kinds: Iterable[str], sequences: Iterable[int | None]) -> None:
        for kind, sequence in zip(kinds, sequences):
            if sequence is None:
                self.append_failures.add(1)
            else:
                self.events_recorded.add(1, {"kind": kind})

    # -- gauges -------------------------------------------------------------------------------

    def _per_watcher(self) -> dict[str, tuple[int, int | None]]:
        """watcher -> (most unread events, fewest events of lead) over its pairs."""
        if self.gateway.closed or self._detach is None:
            return {}
        found: dict[str, tuple[int, int | None]] = {}
        for pair in all_pairs(self.gateway):
            lag, lead = found.get(pair.watcher, (0, None))
            if pair.lead_events is not None:
                lead = pair.lead_events if lead is None else min(lead, pair.lead_events)
            found[pair.watcher] = (max(lag, pair.behind), lead)
        return found

    def _observe_lag(self, _options: Any) -> list[Any]:
        from opentelemetry.metrics import Observation

        return [Observation(lag, {"watcher": w}) for w, (lag, _) in sorted(self._per_watcher().items())]

    def _observe_lead(self, _options: Any) -> list[Any]:
        from opentelemetry.metrics import Observation

        return [Observation(lead, {"watcher": w}) for w, (_, lead) in sorted(self._per_watcher().items())
                if lead is not None]


__all__ = ["GatewayMetrics", "instrument", "metrics_of"]
