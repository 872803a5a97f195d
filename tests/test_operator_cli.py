"""The operator commands against live databases of each backend: ``sessions`` (list, create),
``watchers KEY``, ``prune`` (dry run, then ``--apply``), ``tail`` (live, across processes);
bad input is one line on stderr and exit 2, and the looking commands change nothing."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from sessionstate import Gateway
from sessionstate.clients.cli import main
from sessionstate.shared.timefmt import DAY_SECONDS
from sessionstate.clients.operator import observe

MANAGER, WORKER = "agent:main:main", "agent:main:subagent:worker"
WAIT_SECONDS = 60  # a bound for a hung command, never a timing assertion


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sessionstate.clients.cli", *args], capture_output=True, text=True,
                          timeout=WAIT_SECONDS, stdin=subprocess.DEVNULL)


def refused(done: subprocess.CompletedProcess[str], code: str) -> bool:
    lines = done.stderr.strip().splitlines()
    return done.returncode == 2 and done.stdout == "" and len(lines) == 1 and lines[0].startswith(f"sessionstate: {code}:")


def human(gw: Gateway, key: str = WORKER) -> None:
    gw.record_event(key, "human_direct_message", actor_type="human", summary="human message via telegram")


@pytest.fixture
def world(db_url):
    """A manager watching its worker, three human messages in: pending with more (L/N/M 1/2/4)."""
    with Gateway.open(db_url) as gw:
        gw.create_session(MANAGER)
        gw.create_session(WORKER, kind="subagent", parent=MANAGER)
        for _ in range(3):
            human(gw)
    return db_url


def test_sessions_create_then_list(db_url):
    assert cli("sessions", "create", MANAGER, "--db", db_url).returncode == 0
    made = cli("sessions", "create", WORKER, "--kind", "subagent", "--parent", "main", "--label", "w", "--db", db_url)
    assert made.returncode == 0 and f"child of {MANAGER}, which watches it" in made.stdout, made.stderr
    listed = cli("sessions", "--db", db_url)
    assert listed.returncode == 0 and listed.stdout.strip().splitlines()[-1] == "2 session(s)"
    rows = [json.loads(line) for line in cli("sessions", "list", "--json", "--db", db_url).stdout.splitlines()]
    assert [(r["key"], r["kind"], r["parent"], r["stateVersion"]) for r in rows] == [
        (MANAGER, "main", None, 1), (WORKER, "subagent", MANAGER, 3)]  # each `created` (R27), then the spawn
    with Gateway.open(db_url, create=False) as gw:
        assert gw.ops.cursor_positions(MANAGER, WORKER) is not None  # the spawn edge seeded it


def test_sessions_create_makes_the_database_an_mcp_entry_can_serve(tmp_path):
    db = tmp_path / "new" / "state.db"
    assert cli("sessions", "create", MANAGER, "--db", str(db)).returncode == 0
    assert db.exists()
    with Gateway.open(str(db), create=False) as gw:
        assert gw.ops.session_exists(MANAGER)


def test_sessions_bad_input(db_url, tmp_path):
    assert cli("sessions", "create", MANAGER, "--db", db_url).returncode == 0
    assert refused(cli("sessions", "create", MANAGER, "--db", db_url), "session_exists")
    assert refused(cli("sessions", "create", "agent:main:x", "--kind", "bogus", "--db", db_url), "invalid_argument")
    assert refused(cli("sessions", "create", "agent:main:x", "--parent", "ghost", "--db", db_url), "unknown_session")
    assert refused(cli("sessions", "create", "bad key", "--db", db_url), "invalid_argument")
    missing = tmp_path / "nowhere" / "state.db"
    assert refused(cli("sessions", "--db", str(missing)), "storage_unavailable") and not missing.parent.exists()
    usage = cli("sessions", "create")  # argparse: no key
    assert refused(usage, "usage_error") and "sessions create: the following arguments are required: key" in usage.stderr


def test_watchers_shows_each_pair_without_changing_it(world):
    with observe(world) as gw:  # Gateway.open would sweep (N := M) before we looked
        before = gw.ops.cursor_positions(MANAGER, WORKER)
    assert before[0] < before[1] < before[2]  # pending with more: the sweep would have moved N
    shown = cli("watchers", "main", "--db", world, "--max-rows", "100")
    assert shown.returncode == 0, shown.stderr
    head, pair, owes = shown.stdout.strip().splitlines()
    assert head == f"{MANAGER}: watches 1 target(s); never woken"
    L, N, M = before
    assert f"L/N/M {L}/{N}/{M}" in pair and "3 behind" in pair
    assert owes.strip() == f'owes: Session "{WORKER}" changed (other actor). Reconcile before acting:' \
        f' session_status sessionKey "{WORKER}" changesSince {L}.'
    (row,) = [json.loads(line) for line in cli("watchers", MANAGER, "--json", "--db", world, "--max-rows", "100").stdout.splitlines()]
    assert row["state"] == "pending_with_more" and (row["lastSeen"], row["notified"], row["material"]) == tuple(before)
    assert row["behind"] == 3 and row["oldestUnread"] == L + 1 and not row["historyGap"]
    # Row cap 100: the oldest unread event goes once 100 events are newer; M - (L + 1) are now.
    assert row["leadEvents"] == 100 - (M - (L + 1))
    assert 29 * DAY_SECONDS < row["leadSeconds"] <= 30 * DAY_SECONDS
    with observe(world) as gw:
        assert gw.ops.cursor_positions(MANAGER, WORKER) == before  # watchers ran no sweep


def test_watchers_bad_input(world):
    assert refused(cli("watchers", "ghost", "--db", world), "unknown_session")
    assert refused(cli("watchers", "bad key", "--db", world), "invalid_argument")
    usage = cli("watchers", MANAGER, "--max-rows", "many", "--db", world)
    assert refused(usage, "usage_error") and "invalid int value" in usage.stderr


@pytest.fixture
def aged(db_url):
    """The manager's unread events were recorded forty days ago: the next prune cuts them."""
    past = time.time() - 40 * DAY_SECONDS
    with Gateway.open(db_url, clock=lambda: past) as gw:
        gw.create_session(MANAGER)
        gw.create_session(WORKER, kind="subagent", parent=MANAGER)
        for _ in range(3):
            human(gw)
    with Gateway.open(db_url, auto_prune=False) as gw:  # R30 would prune the aged events at open
        gw.create_session("agent:main:fresh")
        human(gw, "agent:main:fresh")
    return db_url


def test_prune_shows_what_would_go_then_does_it(aged):
    with Gateway.open(aged, create=False, auto_prune=False) as gw:
        before = gw.store.dump()
    dry = cli("prune", "--db", aged)
    assert dry.returncode == 0, dry.stderr
    # Old: both sessions' `created` (R27), the spawn and three human turns; fresh: its
    # `created` and one turn.
    assert "events: 8 retained; would remove 6 (6 past the retention window, 0 over the row cap)" in dry.stdout
    assert f"{MANAGER} -> {WORKER}" in dry.stdout and "dry run: nothing changed" in dry.stdout
    with Gateway.open(aged, create=False, auto_prune=False) as gw:
        assert gw.store.dump() == before
    plan = json.loads(cli("prune", "--json", "--db", aged, "--max-rows", "0").stdout)["plan"]
    assert plan["eventsOverRowCap"] == 8 and plan["eventsToRemove"] == 8
    done = cli("prune", "--apply", "--db", aged)
    assert done.returncode == 0 and "pruned: {'events': 6" in done.stdout, done.stdout + done.stderr
    after = json.loads(cli("watchers", MANAGER, "--json", "--db", aged).stdout)
    assert after["historyGap"] is True
    again = cli("prune", "--db", aged)
    assert "would remove 0" in again.stdout


def test_prune_bad_input(aged):
    assert refused(cli("prune", "--retention-days", "soon", "--db", aged), "usage_error")
    assert refused(cli("prune", "--retention-days", "-1", "--db", aged), "invalid_argument")


def _reader(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)


def test_tail_follows_notices_and_wakes_from_another_process(world):
    process = subprocess.Popen([sys.executable, "-m", "sessionstate.clients.cli", "tail", "--json", "--db", world],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(process.stdout, out), daemon=True).start()
    try:
        assert "following" in process.stderr.readline()  # type: ignore[union-attr]  # the feed is open
        with Gateway.open(world, create=False, on_wake=lambda watcher, reason: None) as gw:
            gw.drain_system_events(MANAGER)
        with Gateway.open(world, create=False, on_wake=lambda watcher, reason: None) as gw:
            gw.drain_system_events(MANAGER)  # caught up: the next event owes a new notice
            human(gw)
        seen: list[dict] = []
        deadline = time.monotonic() + WAIT_SECONDS
        while not {"notice", "wake", "event"} <= {line["type"] for line in seen} and time.monotonic() < deadline:
            try:
                seen.append(json.loads(out.get(timeout=1)))
            except queue.Empty:
                pass
        notices = [line for line in seen if line["type"] == "notice"]
        assert notices and notices[0]["watcher"] == MANAGER and notices[0]["target"] == WORKER, seen
        assert notices[0]["text"].startswith(f'Session "{WORKER}" changed (other actor).')
        assert any(line["type"] == "wake" and line["watcher"] == MANAGER for line in seen), seen
        assert any(line["type"] == "event" and line["session"] == WORKER for line in seen), seen
        process.send_signal(signal.SIGINT)
        status = process.wait(timeout=WAIT_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = process.stderr.read()  # type: ignore[union-attr]
    assert status == 130 and "Traceback" not in stderr, stderr


def test_follow_reports_the_wake_of_a_change_made_as_soon_as_it_is_ready(world):
    """``ready`` comes after the feed and the wake baseline are taken: an event recorded from
    then on is reported with its notice and its wake (the CLI prints "following" there)."""
    from sessionstate.clients.tail import follow

    seen: list[dict] = []
    polls: list[int] = []

    def record_elsewhere() -> None:
        with Gateway.open(world, create=False, on_wake=lambda watcher, reason: None) as other:
            other.drain_system_events(MANAGER)
            human(other)

    def enough() -> bool:
        polls.append(1)
        return {"notice", "wake", "event"} <= {line["type"] for line in seen} or len(polls) > 200

    with Gateway.open(world, create=False) as gw:
        follow(gw, seen.append, poll=0.05, stop=enough, ready=record_elsewhere)
    assert any(line["type"] == "wake" and line["watcher"] == MANAGER for line in seen), seen
    assert any(line["type"] == "event" and line["session"] == WORKER for line in seen), seen


def test_tail_bad_input(world, tmp_path):
    assert refused(cli("tail", "--poll", "0", "--db", world), "invalid_argument")
    assert refused(cli("tail", "--db", str(tmp_path / "none.db")), "storage_unavailable")


@pytest.mark.parametrize("argv, where, what", [
    (["sessions", "create"], "sessions create", "the following arguments are required: key"),
    (["sessions", "remove", "x"], "sessions", "argument ACTION: invalid choice: 'remove'"),
    (["sessions", "--bogus"], "", "unrecognized arguments: --bogus"),
    (["watchers"], "watchers", "the following arguments are required: key"),
    (["watchers", "main", "--lead-rows"], "", "unrecognized arguments: --lead-rows"),
    (["tail", "--poll", "soon"], "tail", "argument --poll: invalid float value: 'soon'"),
    (["prune", "--max-rows", "a\nb"], "prune", "argument --max-rows: invalid int value: 'a\\nb'"),
    (["nonsense"], None, "argument COMMAND: invalid choice: 'nonsense'"),
    ([], None, "the following arguments are required: COMMAND"),
])
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, where, what):
    """argparse's own error is the usage block and then the error; ours is the one line every
    other error prints, naming the (sub)command whose parser refused (``unrecognized
    arguments`` comes from the top parser, after the subcommand parsed what it knew)."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and out == ""
    [line] = err.splitlines()
    prefix = "sessionstate: usage_error: " + (f"{where}: " if where else "")
    assert line.startswith(prefix + what), line
    assert line.endswith(" --help)") and "usage:" not in line


@pytest.mark.parametrize("argv", [["--help"], ["sessions", "--help"], ["sessions", "create", "--help"],
                                  ["watchers", "--help"], ["tail", "--help"], ["prune", "--help"]])
def test_help_still_prints_the_usage_and_exits_0(capsys, argv):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    assert exited.value.code == 0 and err == ""
    assert out.startswith("usage: sessionstate") and "options:" in out
