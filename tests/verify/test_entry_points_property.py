"""Every public entry point against all of Unicode and arbitrary JSON (issue 9, "Done when").

The Python API (every public ``Gateway`` method that takes input), ``call_tool`` (every tool)
and the command line (``cli.main``) get strings drawn from all of Unicode, lone surrogates
included, and arbitrary JSON values (with a few values built to break naive code: 100,000
levels of nesting, 10**400). Each call succeeds, raises a ``SessionStateError`` subclass, or
(``call_tool``) returns an error result that is not ``internal_error``; nothing else escapes.
Whenever a call is refused, a full dump of the database file (every table, through a separate
connection) and the system event queues are unchanged.
"""

from __future__ import annotations

import io
import sqlite3
import sys
from contextlib import closing, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from sessionstate import Gateway, SessionStateError
from sessionstate.clients.cli import build_parser, main
from sessionstate.runner import Rule, ScriptedRunner
from sessionstate.shared.policy import ToolPolicy
from sessionstate.tools.schemas import TOOL_SCHEMAS

MANAGER = "agent:main:main"
PEER = "agent:main:peer"
CHILD = "agent:main:subagent:child"
KEYS = [MANAGER, PEER, CHILD, "main", "global", "agent:main:ghost", "agent:other:main"]
SURROGATE = "\ud800"

# All of Unicode: Hypothesis leaves the surrogate category out unless asked for it.
surrogate = st.characters(categories=["Cs"])
any_char = st.one_of(st.characters(exclude_categories=()), surrogate)
# Hypothesis draws code points with a bias to low ones, so surrogates in a plain text draw are
# rare: half the strings get one spliced in.
any_text = st.one_of(
    st.text(alphabet=any_char, max_size=24),
    st.builds(lambda a, s, b: a + s + b, st.text(alphabet=any_char, max_size=10), surrogate, st.text(alphabet=any_char, max_size=10)),
)


class Deep(list):  # type: ignore[type-arg]
    """A list nested 100,000 levels deep that prints short (Hypothesis reports failing values)."""

    def __repr__(self) -> str:
        return "<a list nested 100,000 levels deep>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


_inner: list[Any] = []
for _ in range(100_000 - 1):
    _inner = [_inner]
DEEP = Deep([_inner])
hostile = st.sampled_from([10**400, -(10**400), 2**64, float("nan"), float("inf"), DEEP, {"a": DEEP}, "x" * 30_000])
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | any_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=12,
)
WORDS = ["hello", "a task", "telegram", "model-a", "u1", "run-1", "created"]


def splice(text: str) -> st.SearchStrategy[str]:
    """``text`` with a lone surrogate put somewhere into it."""
    return st.builds(lambda at, s: text[:at] + s + text[at:], st.integers(0, len(text)), surrogate)


# Plausible values weigh as much as junk, so that calls reach past the first check; a
# plausible value with a surrogate spliced in is the input that used to get furthest.
spliced_word = st.sampled_from(WORDS).flatmap(splice)
junk = st.one_of(st.sampled_from(WORDS), spliced_word, spliced_word, any_text, json_value, hostile)
valid_key = st.sampled_from(KEYS[:5])  # the sessions the world has
key = st.one_of(valid_key, valid_key, valid_key, valid_key.flatmap(splice), any_text, junk)
maybe = lambda strategy: st.one_of(st.none(), strategy)  # noqa: E731

Call = Callable[[Gateway, st.DataObject], Any]


def d(data: st.DataObject, strategy: st.SearchStrategy[Any], label: str) -> Any:
    return data.draw(strategy, label=label)


def kw(data: st.DataObject, **strategies: st.SearchStrategy[Any]) -> dict[str, Any]:
    """Keyword arguments, each given or left out."""
    return {name: d(data, s, name) for name, s in strategies.items() if d(data, st.booleans(), f"give {name}")}


CALLS: dict[str, Call] = {
    "create_session": lambda gw, x: gw.create_session(d(x, key, "key"), **kw(
        x, agent_id=key, kind=st.one_of(st.sampled_from(["main", "subagent"]), junk), parent=key, label=junk,
        run_id=junk, channel=junk, model=junk, thinking=junk, runtime=junk, sandboxed=junk)),
    "session_exists": lambda gw, x: gw.ops.session_exists(d(x, key, "key"), d(x, maybe(key), "agent")),
    "resolve": lambda gw, x: gw.ops.resolve(d(x, key, "key"), d(x, maybe(key), "agent")),
    "record_event": lambda gw, x: gw.record_event(
        d(x, key, "key"), d(x, st.one_of(st.sampled_from(["goal_changed", "human_direct_message", "run_failed"]), junk), "kind"),
        actor_type=d(x, st.one_of(st.sampled_from(["human", "agent"]), junk), "actor"), summary=d(x, junk, "summary"),
        **kw(x, actor_id=key, agent_id=key, run_id=junk, payload=junk, dedupe_key=junk, occurred_at=junk)),
    "record_events": lambda gw, x: gw.record_events(d(x, st.one_of(junk, st.lists(st.dictionaries(
        st.sampled_from(["session_key", "kind", "actor_type", "summary", "payload", "occurred_at", "bogus"]), junk), max_size=3)), "events")),
    "prepare_event": lambda gw, x: gw.ops.prepare_event(
        d(x, key, "key"), d(x, st.one_of(st.sampled_from(["goal_changed", "human_direct_message"]), junk), "kind"),
        actor_type=d(x, junk, "actor"), summary=d(x, junk, "summary"),
        **kw(x, actor_id=key, agent_id=key, payload=junk, occurred_at=junk)),
    "prepare_events": lambda gw, x: gw.ops.prepare_events(d(x, st.one_of(junk, st.lists(st.dictionaries(
        st.sampled_from(["session_key", "kind", "actor_type", "summary", "payload", "bogus"]), junk), max_size=3)), "events")),
    "record_prepared": lambda gw, x: gw.ops.record_prepared(d(x, st.one_of(junk, st.lists(st.lists(junk, max_size=2), max_size=2)), "calls")),
    "observe": lambda gw, x: gw.ops.observe(d(x, junk, "observer")),
    "allowed_tools": lambda gw, x: gw.allowed_tools(d(x, key, "caller")),
    "queued_events": lambda gw, x: gw.ops.queued_events(d(x, key, "key")),
    "forget_queued": lambda gw, x: gw.ops.forget_queued(d(x, maybe(junk), "key")),
    "serve": lambda gw, x: gw.cluster.serve(d(x, st.one_of(junk, st.lists(junk, max_size=2)), "patterns")),
    "watch": lambda gw, x: gw.watch(d(x, key, "w"), d(x, key, "t"), **kw(x, target_agent_id=key, ambient=junk)),
    "watchers_of": lambda gw, x: gw.ops.watchers_of(d(x, key, "t"), **kw(x, target_agent_id=key)),
    "unwatch": lambda gw, x: gw.unwatch(d(x, key, "w"), d(x, key, "t"), **kw(x, target_agent_id=key)),
    "drain_system_events": lambda gw, x: gw.drain_system_events(d(x, key, "key")),
    "pending_system_events": lambda gw, x: gw.pending_system_events(d(x, key, "key")),
    "attach": lambda gw, x: gw.cluster.attach(d(x, key, "key")),
    "detach": lambda gw, x: gw.cluster.detach(d(x, key, "key")),
    "serves": lambda gw, x: gw.cluster.serves(d(x, key, "key")),
    "queue_owed_notices": lambda gw, x: gw.ops.queue_owed_notices(d(x, key, "key")),
    "enqueue_system_event": lambda gw, x: gw.ops.enqueue_system_event(d(x, key, "key"), d(x, junk, "text")),
    "session_status": lambda gw, x: gw.session_status(d(x, key, "key"), **kw(x, changes_since=junk, agent_id=key)),
    "call_tool": lambda gw, x: gw.call_tool(d(x, key, "caller"), d(x, st.one_of(st.sampled_from(list(TOOL_SCHEMAS)), junk), "name"), d(x, junk, "args")),
    "reset_session": lambda gw, x: gw.ops.reset_session(d(x, key, "key"), **kw(x, agent_id=key)),
    "delete_session": lambda gw, x: gw.ops.delete_session(d(x, key, "key"), **kw(x, agent_id=key)),
    "cursor_positions": lambda gw, x: gw.ops.cursor_positions(d(x, key, "w"), d(x, key, "t"), **kw(x, target_agent_id=key)),
    "state_version": lambda gw, x: gw.ops.state_version(d(x, key, "key"), d(x, maybe(key), "agent")),
    "session_meta": lambda gw, x: gw.registry.session_meta(d(x, key, "key"), d(x, maybe(key), "agent")),
    "resolve_session_id": lambda gw, x: gw.registry.resolve_session_id(d(x, junk, "id")),
    "set_model_override": lambda gw, x: gw.registry.set_model_override(d(x, key, "key"), d(x, maybe(junk), "model"), **kw(x, agent_id=key)),
    "set_route": lambda gw, x: gw.registry.set_route(d(x, key, "key"), d(x, junk, "channel"), d(x, maybe(junk), "to"), **kw(x, agent_id=key)),
    "append_message": lambda gw, x: gw.transcripts.append_message(
        d(x, key, "key"), d(x, st.one_of(st.sampled_from(["user", "assistant", "tool"]), junk), "role"), d(x, junk, "text"),
        **kw(x, agent_id=key, actor_type=junk, actor_id=key, provenance=junk, tool_calls=junk, tool_result=junk,
             input_tokens=junk, output_tokens=junk)),
    "human_message": lambda gw, x: gw.transcripts.human_message(d(x, key, "key"), d(x, junk, "text"), **kw(x, channel=junk, sender=junk, agent_id=key)),
    "recent_user_messages": lambda gw, x: gw.transcripts.recent_user_messages(d(x, key, "key"), d(x, st.one_of(st.integers(0, 5), junk), "limit")),
    "transcript": lambda gw, x: gw.transcripts.transcript(d(x, key, "key"), **kw(x, limit=junk, agent_id=key)),
    "goal_changed": lambda gw, x: gw.producers.goal_changed(
        d(x, key, "key"), d(x, st.one_of(st.sampled_from(["created", "updated"]), junk), "change"),
        actor_type=d(x, st.one_of(st.just("agent"), junk), "actor"), **kw(x, actor_id=key, agent_id=key, occurred_at=junk)),
    "compacted": lambda gw, x: gw.producers.compacted(d(x, key, "key"), d(x, junk, "op"), **kw(
        x, actor_type=junk, actor_id=key, agent_id=key, messages_before=junk, messages_after=junk, occurred_at=junk)),
    "get_run": lambda gw, x: gw.runs.get_run(d(x, junk, "run")),
    "runs_of": lambda gw, x: gw.runs.runs_of(d(x, st.one_of(st.tuples(key, key), junk), "requester"), d(x, st.one_of(st.integers(0, 5), junk), "limit")),
    "runs_of_child": lambda gw, x: gw.runs.runs_of_child(d(x, st.one_of(st.tuples(key, key), junk), "child")),
    "finish_run": lambda gw, x: gw.runs.finish_run(d(x, junk, "run"), d(x, st.one_of(st.sampled_from(["completed", "error"]), junk), "outcome"),
                                              **kw(x, text=junk, actor_type=junk, actor_id=key, announce=junk, usage=junk)),
    "kill_run": lambda gw, x: gw.runs.kill_run(d(x, junk, "run"), **kw(x, actor_id=key, announce=junk)),
    "steer_run": lambda gw, x: gw.runs.steer_run(d(x, junk, "run"), d(x, junk, "guidance"), sender=d(x, key, "sender")),
    "start_run": lambda gw, x: gw.runs.start_run(d(x, junk, "run"), d(x, junk, "prompt")),
    "configure_tools": lambda gw, x: gw.configure_tools(**kw(x, policy=junk, runner=junk, id_factory=junk)),
    "wait_for_runs": lambda gw, x: gw.runs.wait_for_runs(d(x, st.one_of(st.floats(0, 0.01), junk), "timeout")),
    "stop_runs": lambda gw, x: gw.runs.stop_runs(d(x, st.one_of(st.floats(0, 0.01), junk), "timeout")),
}
# Public methods without input to vary (lifecycle, context managers, no-argument reads and
# maintenance); Gateway.open is covered by the storage tests' arbitrary-URL property.
NO_INPUT = {"open", "close", "locked", "transaction", "prune", "startup_sweep", "active_runs", "sweep",
            "fire_due_wakes", "diagnostics", "register", "heartbeat", "attached", "list_sessions", "all_meta",
            "stop_wakes", "unregister", "clock"}
# The parts' public helpers for the layers beside them (the tools, the change pump, the gateway's
# own open and close): fed here through the calls that use them, never called by an application.
HELPERS = {"ensure_meta", "insert_meta", "meta_of", "parent_of", "session_record", "update_meta",  # registry
           "first_text", "recent", "stats",  # transcripts
           "active_by_requester", "insert",  # runs
           "reconcile", "serves_here", "take_wake_slot",  # cluster
           "line_wakes", "queue_notices", "resolve_any_agent", "shut", "trace_to", "wakes_for"}  # ops


PART_NAMES = ("registry", "transcripts", "producers", "runs", "cluster", "ops")


def public_methods() -> set[str]:
    """The public calls that take input: the gateway's own and its parts' methods, by name."""
    gw = Gateway.open("sqlite://")
    try:
        own = {name for name in dir(Gateway) if not name.startswith("_") and callable(getattr(Gateway, name))}
        parts = {name for part in PART_NAMES for name in dir(getattr(gw, part))
                 if not name.startswith("_") and callable(getattr(getattr(gw, part), name))}
        return own - set(PART_NAMES) | parts
    finally:
        gw.close()


def test_every_public_method_is_fed_or_has_no_input():
    assert public_methods() - NO_INPUT - HELPERS == set(CALLS)
    assert HELPERS | NO_INPUT <= public_methods()  # neither list names what is gone


def db_dump(path: Path) -> list[str]:
    """The whole database, every table, as SQL text read through a separate connection."""
    with closing(sqlite3.connect(path)) as connection:
        return list(connection.iterdump())


def make_world(path: Path) -> Gateway:
    gw = Gateway.open(f"sqlite:///{path}")
    runner = ScriptedRunner([Rule("agent:main:subagent:held*", "task", ["late"], delay=600)])
    gw.configure_tools(ToolPolicy(visibility="agent", profile="coding"), runner=runner)
    gw.create_session(MANAGER, channel="telegram")
    gw.create_session(PEER, label="peer")
    gw.create_session(CHILD, kind="subagent", parent=MANAGER)
    gw.create_session("global", agent_id="main")
    gw.transcripts.human_message(PEER, "hello", channel="telegram", sender="u1")
    gw.watch(MANAGER, PEER)
    gw.record_event(PEER, "goal_changed", actor_type="agent", summary="goal set")  # a pending notice
    return gw


def snapshot(gw: Gateway, path: Path) -> tuple[Any, ...]:
    gw.runs.wait_for_runs(5)  # background replies land before the picture is taken
    return db_dump(path), {k: gw.pending_system_events(k) for k in (MANAGER, PEER, CHILD)}


def fuzz(path: Path, gw: Gateway, call: Callable[[st.DataObject], Any], examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        before = snapshot(gw, path)
        try:
            result = call(data)
        except SessionStateError:
            assert snapshot(gw, path) == before
            return
        if isinstance(result, dict) and result.get("status") == "error":
            assert result["error"]["code"] != "internal_error", result
            assert snapshot(gw, path) == before

    run()


@pytest.mark.parametrize("method", sorted(CALLS))
def test_python_api_gives_a_typed_error_and_changes_nothing(method, tmp_path):
    path = tmp_path / "state.db"
    gw = make_world(path)
    try:
        fuzz(path, gw, lambda data: CALLS[method](gw, data), examples=40)
    finally:
        gw.runs.stop_runs(1)
        gw.close()


def plausible(prop: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values the tool's schema may accept, so that calls get past the schema too."""
    if "enum" in prop:
        return st.sampled_from(prop["enum"])
    kind = prop.get("type")
    if kind == "boolean":
        return st.booleans()
    if kind in ("integer", "number"):
        return st.integers(int(prop.get("minimum", 0)), min(int(prop.get("maximum", 10)), 10))
    if kind == "array":
        return st.lists(plausible(prop["items"]), max_size=3)
    return st.sampled_from([PEER, CHILD, "main", "current", "all", "a task"])


# Arguments every call gets (a valid value), beside the schema's optional ones.
ALWAYS = {"sessions_history": ["sessionKey"], "sessions_send": ["sessionKey", "message"], "sessions_spawn": ["task"]}


def tool_args(tool: str) -> st.SearchStrategy[Any]:
    """A valid-looking call with at most one argument spoilt (or any JSON at all)."""
    properties = TOOL_SCHEMAS[tool]["properties"]
    always = ALWAYS.get(tool, [])
    base = st.fixed_dictionaries(
        {name: plausible(properties[name]) for name in always},
        optional={name: plausible(p) for name, p in properties.items() if name not in always},
    )
    spliced = st.sampled_from(WORDS + [PEER]).flatmap(splice)
    bad_value = st.one_of(spliced, spliced, any_text, junk)
    spoilt = st.builds(lambda args, name, bad: {**args, name: bad} if name else args,
                       base, st.sampled_from([None, *properties]), bad_value)
    return st.one_of(spoilt, spoilt, spoilt, junk)


@pytest.mark.parametrize("tool", sorted(TOOL_SCHEMAS))
def test_call_tool_gives_an_error_result_and_changes_nothing(tool, tmp_path):
    path = tmp_path / "state.db"
    gw = make_world(path)
    callers = st.one_of(st.just(MANAGER), st.just(MANAGER), st.sampled_from([PEER, CHILD]), key)

    def call(data: st.DataObject) -> Any:
        result = gw.call_tool(d(data, callers, "caller"), tool, d(data, tool_args(tool), "args"))
        assert isinstance(result, dict)
        return result

    try:
        fuzz(path, gw, call, examples=80)
    finally:
        gw.runs.stop_runs(1)
        gw.close()


COMMANDS = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]


def test_cli_gives_exit_code_2_and_changes_nothing(tmp_path, monkeypatch):
    path = tmp_path / "state.db"
    make_world(path).close()
    url = f"sqlite:///{path}"
    # Whatever an argument list says, nothing may be written outside this directory.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SESSIONSTATE_DB", str(tmp_path / "default.db"))
    monkeypatch.setenv("HOME", str(tmp_path))
    name = st.one_of(st.sampled_from(KEYS), st.sampled_from(KEYS).map(lambda k: k + SURROGATE), any_text)
    arg = st.one_of(name, st.integers().map(str), st.sampled_from(["--json", "--agent", "-h", "--", "--db"]))
    status = st.builds(
        lambda k, extra, options: ["status", k, *extra, *options, "--db", url],
        name, st.lists(arg, max_size=3),
        st.lists(st.one_of(st.tuples(st.just("--agent"), arg), st.tuples(st.just("--changes-since"), arg),
                           st.tuples(st.just("--json"))), max_size=3).map(lambda pairs: [t for pair in pairs for t in pair]),
    )
    anything = st.lists(arg, max_size=4).filter(lambda argv: not argv or argv[0] not in COMMANDS)
    before = db_dump(path)

    @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(argv=st.one_of(status, anything))
    def run(argv: list[str]) -> None:
        # The real streams: stdout strict UTF-8, stderr with backslashreplace.
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
        err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse: usage errors (2) and --help (0)
                code = exc.code
            out.flush()
            err.flush()
        assert code in (0, 2), (argv, code)
        stderr = err.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]
        if code == 2:
            assert stderr.startswith(("usage:", "sessionstate: ")) and "internal" not in stderr.split(":")[1], stderr
        assert db_dump(path) == before
        assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("state.db")) == [], "a file was created"

    run()


def test_the_property_strings_include_lone_surrogates():
    found: list[str] = []

    @settings(max_examples=200, database=None)
    @given(text=any_text)
    def collect(text: str) -> None:
        if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
            found.append(text)

    collect()
    assert len(found) >= 20  # about half of 200
    assert sys.maxunicode == 0x10FFFF
