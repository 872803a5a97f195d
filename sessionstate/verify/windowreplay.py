"""The explorer's wakes on the real store, inside the wake window.

``replay.replay_trace`` moves the clock a minute a step, past the 20 s window, so every wake is
immediate and none is ever owed there. Here the clock stands still between the trace's
``tick`` actions (every step happens inside the window that the last wake opened) and a
``tick`` moves it past the window and fires the gateway's due owed wakes. After every step the
main-style watcher A's real wakes must be the wake layer's (``wakemodel.py``: the explorer's
``step``): as many in that step. So an owed wake the gateway forgets (R12, R23), or one it sends
inside a window (WAKE1), is a difference on the real gateway, not only in the model.

One process; a ``crash`` (the explorer's lost in-flight wake) has no real counterpart beyond a
restart, so traces with one are replayed for their durable state only (``replay.py``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from . import replay
from .modelcheck import initial_node, step
from .world import AMBIENT, PAIRS, Action, describe


def replay_in_window(trace: list[Action], directory: Path | None = None) -> tuple[list[str], int]:
    """Run ``trace`` with the clock inside the window; returns the differences in A's wakes
    (empty when equal) and how many of A's wakes were owed ones (fired at a tick)."""
    owed_fired = 0
    with tempfile.TemporaryDirectory(prefix="sessionstate-window-", dir=directory) as tmp:
        url = f"sqlite:///{Path(tmp) / 'state.db'}"
        wakes = replay.ReplayWakes()
        gw = replay.open_replayed(url, wakes)
        try:
            for key in replay.KEYS.values():
                gw.create_session(key)
            for watcher, target in PAIRS:
                gw.watch(replay.KEYS[watcher], replay.KEYS[target], ambient=(watcher, target) in AMBIENT)
            node = initial_node()
            for index, action in enumerate(trace):
                wakes.sent = []
                if action[0] == "tick":
                    wakes.now += replay.STEP_SECONDS
                gw = replay.apply_real(gw, url, action, wakes)
                before = node.wakes.wakes
                node, _ = step(node, action)
                want = node.wakes.wakes - before
                got = sum(1 for watcher, _ in wakes.sent if watcher == "A")
                if action[0] == "tick":
                    owed_fired += got
                if got != want:
                    steps = [f"{i + 1}. {describe(a)}" for i, a in enumerate(trace[: index + 1])]
                    return steps + [f"A woken {got} time(s) for real, {want} in the wake model"], owed_fired
        finally:
            gw.close()
    return [], owed_fired
