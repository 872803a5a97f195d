"""A gateway process for ``test_owed_wakes_processes.py``: serves the given session patterns
with the change pump and the given wake window, reports each wake (with its wall-clock time)
and obeys JSON commands on stdin: ``record`` (a human message on a session), ``drain``,
``exit``. Killing it with SIGKILL is the crash of the issue's third scenario."""

from __future__ import annotations

import json
import sys
import threading
import time

from sessionstate import Gateway

_out = threading.Lock()


def say(message: dict) -> None:
    with _out:  # wakes come from the timer thread, replies from the main one
        print(json.dumps(message), flush=True)


def main(url: str, serve: str, window: float) -> None:
    patterns = serve.split(",") if serve else []

    opened: list[Gateway] = []

    def on_wake(watcher: str, reason: str) -> None:
        # "at" is the time this process took the durable wake slot (what WAKE1 spaces), not the
        # hook's own later time: on a loaded machine the hook ran up to 12 ms after the slot.
        slot = opened[0].ops.wakes.last(watcher) if opened else None
        say({"wake": watcher, "at": time.time() if slot is None else slot, "hook_at": time.time()})

    with Gateway.open(url, serve=patterns, pump=True, on_wake=on_wake, wake_window=window) as gw:
        opened.append(gw)
        say({"ready": True})
        for line in sys.stdin:
            command = json.loads(line)
            op = command["op"]
            if op == "record":
                gw.record_event(command["key"], "human_direct_message", actor_type="human", summary="hi")
                say({"recorded": True})
            elif op == "drain":
                say({"drained": gw.drain_system_events(command["key"])})
            elif op == "sweep":
                gw.cluster.sweep()
                say({"swept": True})
            elif op == "exit":
                break


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
