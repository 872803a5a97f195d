"""The gateway's parts and the types their signatures take and return, for ``sessionstate``.

The package's root may not import a service (``tests/test_architecture.py``: the facade is the
only door), so the classes a user meets through ``gw.ops``, ``gw.registry``, ``gw.transcripts``,
``gw.producers``, ``gw.runs`` and ``gw.cluster`` are named here, once, and exported there.
"""

from __future__ import annotations

from ..services.cluster import Cluster
from ..services.notice.core import Clock, ProtocolOptions, WakeHook
from ..services.notice.group_commit import Waiter
from ..services.notice.protocol import NoticeProtocol
from ..services.notice.queue import QueuedEvent
from ..services.notice.recording import EventArgs, PreparedEvent
from ..services.producers import Producers
from ..services.registry import Registry
from ..services.runs import Runs
from ..services.transcripts import Transcripts

__all__ = [
    "Clock",
    "Cluster",
    "EventArgs",
    "NoticeProtocol",
    "PreparedEvent",
    "Producers",
    "ProtocolOptions",
    "QueuedEvent",
    "Registry",
    "Runs",
    "Transcripts",
    "Waiter",
    "WakeHook",
]
