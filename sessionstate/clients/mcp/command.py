"""What ``sessionstate mcp`` does around the server: the ``--session`` argument read the way the
tools read a session key (operator.py), and Ctrl-C ending the process at once."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from os import _exit as exit_now  # documented: exit without joining threads or atexit
from types import FrameType

from ..operator import resolve_session_argument

__all__ = ["exit_on_interrupt", "resolve_session_argument"]

# How long the interrupted process may spend ending its runs before it exits regardless.
CLEANUP_SECONDS = 2.0


def exit_on_interrupt(cleanup: Callable[[], object], status: int = 130) -> None:
    """On SIGINT (and SIGTERM) end the process now, with ``status`` (143 for SIGTERM), after
    ``cleanup`` has had up to CLEANUP_SECONDS.

    The SDK reads stdin in a worker thread that no cancellation reaches: a KeyboardInterrupt
    left the server waiting for its next line, and printed a traceback when stdin closed. What
    the server wrote is committed transaction by transaction, so exiting here loses nothing;
    ``cleanup`` ends the runs this process started, as a normal shutdown does."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        code = status if signum == signal.SIGINT else 128 + signum
        threading.Timer(CLEANUP_SECONDS, exit_now, (code,)).start()  # a cleanup that hangs
        try:
            cleanup()
        except BaseException:  # exiting regardless: a failed cleanup must not print a traceback
            pass
        sys.stdout.flush()
        exit_now(code)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
