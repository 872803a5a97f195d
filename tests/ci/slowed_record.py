"""A pytest plugin for the benchmark gate's end-to-end test (``-p tests.ci.slowed_record``):
every ``Gateway.record_event`` spends 50 ms more before it records, as a regression on the
append path would. A busy wait, not a sleep, so the time is spent the way code spends it."""

from __future__ import annotations

import time
from typing import Any

from sessionstate import Gateway

SLOWDOWN_SECONDS = 0.050
_record_event = Gateway.record_event


def _slowed(self: Gateway, *args: Any, **kwargs: Any) -> Any:
    until = time.perf_counter() + SLOWDOWN_SECONDS
    while time.perf_counter() < until:
        pass
    return _record_event(self, *args, **kwargs)


Gateway.record_event = _slowed  # type: ignore[method-assign]
