"""ISO 8601 UTC timestamps with milliseconds, fast enough for 200-event pages.

A page of events usually shares a handful of distinct seconds, so the formatted
"YYYY-MM-DDTHH:MM:SS" prefix is cached per whole second and only the milliseconds are
computed per call. The rounding replicates ``datetime.fromtimestamp`` exactly (round the
fraction half-even to microseconds, carry into the second, then truncate to milliseconds),
so the text is byte-identical to ``datetime.fromtimestamp(t, timezone.utc).isoformat()``.
"""

from __future__ import annotations

import math
import time

_PREFIX_CACHE: dict[int, str] = {}
_PREFIX_CACHE_LIMIT = 4096


def iso_millis(epoch: float) -> str:
    fraction, whole = math.modf(epoch)
    second = int(whole)
    micros = round(fraction * 1e6)
    if micros >= 1_000_000:
        second += 1
        micros -= 1_000_000
    elif micros < 0:
        second -= 1
        micros += 1_000_000
    prefix = _PREFIX_CACHE.get(second)
    if prefix is None:
        if len(_PREFIX_CACHE) >= _PREFIX_CACHE_LIMIT:
            _PREFIX_CACHE.clear()
        prefix = _PREFIX_CACHE[second] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{prefix}.{micros // 1000:03d}Z"
