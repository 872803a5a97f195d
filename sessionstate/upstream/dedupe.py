"""The dedupe keys of the monitor's events, in the reference's shape.

``upstream:<session key>:<source16>:<activity id>`` for a human turn and
``upstream-missing:<session key>:<source16>:<link generation>`` for a vanished source, where
``source16`` is the first 16 hex digits of the SHA-256 of ``<provider>:<host>:<thread id>`` (the
source's id). Naming the session keeps one source's turns apart in two sessions; naming the
source keeps a session's turns apart across the sources it was linked to; the activity id is the
provider's stable id of the turn, so a re-read is absorbed by the signal log. The missing key
names the link's generation (never reused) where the reference names the link's update time.
"""

from __future__ import annotations

import hashlib

SOURCE_HEX_DIGITS = 16


def source_id(provider: str, host: str, thread_id: str) -> str:
    return hashlib.sha256(f"{provider}:{host}:{thread_id}".encode()).hexdigest()[:SOURCE_HEX_DIGITS]


def activity_key(session_key: str, provider: str, host: str, thread_id: str, activity_id: str) -> str:
    return f"upstream:{session_key}:{source_id(provider, host, thread_id)}:{activity_id}"


def missing_key(session_key: str, provider: str, host: str, thread_id: str, generation: int) -> str:
    return f"upstream-missing:{session_key}:{source_id(provider, host, thread_id)}:{generation}"
