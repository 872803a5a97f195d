"""ISO 8601 UTC timestamps with milliseconds, fast enough for 200-event pages.

The text is byte-identical to ``datetime.fromtimestamp(t, timezone.utc)`` truncated to
milliseconds: the fraction of the second is rounded half-even to whole microseconds (carrying
into the second), then the microseconds are truncated to milliseconds. ``iso_millis`` does that
rounding here; ``iso_micros`` takes the instant already rounded to whole microseconds, which
the PostgreSQL event page computes in SQL (store/dialect.py, ``_POSTGRES_PAGE``).

A page of events usually shares a handful of distinct seconds, so the formatted
"YYYY-MM-DDTHH:MM:SS" prefix is cached per whole second (``second_prefix``) and the ".mmmZ"
tail comes from a table (``MILLIS_TAIL``): per timestamp, one division, one cache read and one
concatenation. ``reconcile.events_json`` uses the two directly and skips the cache read while
consecutive events share a second.
"""

from __future__ import annotations

import time

DAY_SECONDS = 86_400.0

_PREFIX_CACHE: dict[int, str] = {}
_PREFIX_CACHE_LIMIT = 4096
# ".000Z" .. ".999Z", indexed by the millisecond within the second.
MILLIS_TAIL = tuple(f".{ms:03d}Z" for ms in range(1000))


def second_prefix(second: int) -> str:
    """The "YYYY-MM-DDTHH:MM:SS" text of whole epoch seconds (cached)."""
    prefix = _PREFIX_CACHE.get(second)
    if prefix is None:
        if len(_PREFIX_CACHE) >= _PREFIX_CACHE_LIMIT:
            _PREFIX_CACHE.clear()
        prefix = _PREFIX_CACHE[second] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return prefix


def iso_micros(micros: int) -> str:
    """The text for an instant given as whole microseconds since the epoch (any sign)."""
    second, within = divmod(micros, 1_000_000)  # floors: 0 <= within < 1_000_000
    return second_prefix(second) + MILLIS_TAIL[within // 1000]


def epoch_micros(epoch: float) -> int:
    """Epoch seconds in whole microseconds: the fraction (exact in binary: ``epoch -
    int(epoch)``) times 10**6, rounded half-even as ``datetime.fromtimestamp`` rounds it."""
    second = int(epoch)  # truncates toward zero, like math.modf
    return second * 1_000_000 + round((epoch - second) * 1e6)


def iso_millis(epoch: float) -> str:
    return iso_micros(epoch_micros(epoch))
