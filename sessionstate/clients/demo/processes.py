"""``sessionstate demo --processes 2``: the story across two gateway processes on one database.

This process serves the manager (it attaches it, and its change pump brings other processes'
notices); a second OS process, started here, records the human's messages into the worker
and serves nothing. The manager's notice crosses from the recorder to the server, wakes the
manager once, and is delivered once even when both processes drain at the same moment.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from .narration import heading, show_json, show_lines
from .story import MANAGER, WORKER
from .database import demo_url, refuse_non_empty
from ...facade.gateway import Gateway
from ...store.factory import is_postgres_url


def _recorder(url: str) -> None:
    """The second process: one command per stdin line, one JSON line back."""
    with Gateway.open(url, serve=[]) as gw:
        for command in sys.stdin:
            if command.strip() == "messages":
                sequences = [
                    gw.record_event(WORKER, "human_direct_message", actor_type="human",
                                    summary="human message via telegram", payload={"channel": "telegram"})
                    for _ in range(20)
                ]
                reply = {"recorded": len(sequences), "queued_here": gw.pending_system_events(MANAGER)}
            elif command.strip() == "message-and-drain":
                gw.record_event(WORKER, "goal_changed", actor_type="human", summary="goal updated")
                reply = {"drained": gw.drain_system_events(MANAGER)}
            else:
                break
            print(json.dumps(reply), flush=True)


def _ask(process: subprocess.Popen[str], command: str) -> dict:
    process.stdin.write(command + "\n")  # type: ignore[union-attr]
    process.stdin.flush()  # type: ignore[union-attr]
    return json.loads(process.stdout.readline())  # type: ignore[union-attr]


def _await_notice(gw: Gateway, seconds: float = 10.0) -> float:
    start = time.monotonic()
    while not gw.pending_system_events(MANAGER) and time.monotonic() - start < seconds:
        time.sleep(0.005)
    return time.monotonic() - start


def run_demo_processes(db: str | None, *, reuse: bool = False) -> int:
    url = demo_url(db)
    wakes: list[str] = []

    def on_wake(watcher: str, reason: str) -> None:
        wakes.append(watcher)
        print(f"   wake -> {watcher} ({reason}) in the serving process")

    with Gateway.open(url, serve=[], pump=True, on_wake=on_wake) as gw:
        refuse_non_empty([s.session_key for s in gw.store.list_sessions()], url, reuse=reuse)
        print(f"sessionstate demo on {url}, two processes")
        for key in (WORKER, MANAGER):  # --reuse: a previous run's sessions
            if gw.ops.session_exists(key):
                gw.ops.delete_session(key)
        heading(1, "Process 1 serves the manager; the manager spawns a worker")
        gw.create_session(MANAGER)
        gw.create_session(WORKER, kind="subagent", parent=MANAGER, run_id="demo-run-1")
        generation = gw.cluster.attach(MANAGER)
        spawn_version = gw.ops.state_version(WORKER)
        feed = "listens for the commits' NOTIFY" if is_postgres_url(url) else "polls PRAGMA data_version"
        print(f"   attached {MANAGER} (claim generation {generation}); its change pump {feed}")

        recorder = subprocess.Popen(
            [sys.executable, "-m", "sessionstate.clients.demo.processes", "--recorder", url],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        try:
            heading(2, "Process 2 records twenty human messages into the worker")
            reply = _ask(recorder, "messages")
            print(f"   process 2 (pid {recorder.pid}) recorded {reply['recorded']} events;"
                  f" its own queue for the manager holds {len(reply['queued_here'])} line(s): it does not serve it")
            waited = _await_notice(gw)
            print(f"   process 1's pump brought the notice after {waited * 1000:.0f} ms")
            show_lines("manager's queue in process 1", gw.pending_system_events(MANAGER))
            print(f"   wakes sent: {len(wakes)}")

            heading(3, "The manager's turn in process 1: one notice, then reconcile")
            show_lines("drained", gw.drain_system_events(MANAGER))
            print(f"   session_status of the worker, changesSince {spawn_version}:")
            show_json(gw.session_status(WORKER, changes_since=spawn_version))
            _await_notice(gw, 1.0)
            show_lines("the follow-up for the messages after the notice", gw.drain_system_events(MANAGER))

            heading(4, "Both processes drain the manager at once: the durable cursor decides")
            recorder.stdin.write("message-and-drain\n")  # type: ignore[union-attr]
            recorder.stdin.flush()  # type: ignore[union-attr]
            mine = gw.drain_system_events(MANAGER)
            theirs = json.loads(recorder.stdout.readline())["drained"]  # type: ignore[union-attr]
            mine += gw.drain_system_events(MANAGER)
            show_lines("delivered by process 1", mine)
            show_lines("delivered by process 2", theirs)
            print(f"   lines delivered in total for the episode: {len(mine) + len(theirs)}")
        finally:
            recorder.stdin.close()  # type: ignore[union-attr]
            recorder.wait(timeout=30)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--recorder"]:
        _recorder(sys.argv[2])
