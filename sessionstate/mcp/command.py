"""What ``sessionstate mcp`` does around the server: the ``--session`` argument read the way the
tools read a session key, and Ctrl-C ending the process at once."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from ..errors import UnknownSession
from ..keys import DEFAULT_AGENT_ID, check_key, is_agent_qualified

if TYPE_CHECKING:
    from ..gateway import Gateway

# How long the interrupted process may spend ending its runs before it exits regardless.
CLEANUP_SECONDS = 2.0


def resolve_session_argument(gw: "Gateway", key: str) -> str:
    """The session ``--session KEY`` names, read as the tools read a key from the default agent
    (tools/context.py): an agent-qualified key names itself; a bare key (``main``) is that key
    under agent ``main``, else the alias ``agent:main:<key>``, else the one agent's session of
    that key."""
    check_key(key, "--session")
    if is_agent_qualified(key) or gw.session_exists(key, DEFAULT_AGENT_ID):
        return key
    alias = f"agent:{DEFAULT_AGENT_ID}:{key}"
    if gw.session_exists(alias):
        return alias
    try:
        return gw.resolve(key)[0]
    except UnknownSession:
        raise UnknownSession(f"unknown session {key!r} (nor {alias!r})") from None


def exit_on_interrupt(cleanup: Callable[[], object], status: int = 130) -> None:
    """On SIGINT (and SIGTERM) end the process now, with ``status`` (143 for SIGTERM), after
    ``cleanup`` has had up to CLEANUP_SECONDS.

    The SDK reads stdin in a worker thread that no cancellation reaches: a KeyboardInterrupt
    left the server waiting for its next line, and printed a traceback when stdin closed. What
    the server wrote is committed transaction by transaction, so exiting here loses nothing;
    ``cleanup`` ends the runs this process started, as a normal shutdown does."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        code = status if signum == signal.SIGINT else 128 + signum
        threading.Timer(CLEANUP_SECONDS, os._exit, (code,)).start()  # a cleanup that hangs
        try:
            cleanup()
        except BaseException:  # exiting regardless: a failed cleanup must not print a traceback
            pass
        sys.stdout.flush()
        os._exit(code)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
