"""The async API's public path: ``from sessionstate.aio import AsyncGateway``.

The implementation lives in ``sessionstate/facade/aio.py`` beside ``Gateway``; this module is
the name users import.
"""
from __future__ import annotations

from .facade.aio import *  # noqa: F401,F403
from .facade.aio import __all__  # noqa: F401
