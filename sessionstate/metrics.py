"""Deprecated path: the metrics client is ``sessionstate.clients.metrics`` now.

Kept for one release so ``from sessionstate.metrics import instrument`` keeps working; it warns.
"""
from __future__ import annotations

import warnings

from .clients.metrics import *  # noqa: F401,F403
from .clients.metrics import __all__  # noqa: F401

warnings.warn(
    "sessionstate.metrics moved to sessionstate.clients.metrics; the old path goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
