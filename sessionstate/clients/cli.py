"""The ``sessionstate`` command line: demo, status, vacuum, diagram, model, schemas, mcp, check,
replay; and the operator commands of cli_operator.py (sessions, watchers, tail, prune, adopt)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NoReturn, Sequence

from ..shared.config import normalize_url
from ..errors import SessionStateError


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse with its usage errors in the shape of every other error the command prints:
    one line, ``sessionstate: usage_error: <command>: <what>``, exit 2 (argparse's own prints the
    usage block and then the error, several lines a script has to pick apart). Subparsers take
    the class of the parser that adds them, so every command and action inherits it; ``--help``
    is untouched."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.partition(" ")[2]  # "sessions create" of "sessionstate sessions create"
        where = f"{command}: " if command else ""
        # A value echoed back may hold a line break: escaped, so the error stays one line.
        what = message.replace("\r", "\\r").replace("\n", "\\n")
        self.exit(2, f"sessionstate: usage_error: {where}{what} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="sessionstate",
        description="Session state awareness: signal log, watcher cursors, stale notices.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="a narrated run of the notice protocol")
    demo.add_argument("--db", default=None,
                      help="database URL or file (default: a new temporary database, its path printed)")
    demo.add_argument("--reuse", action="store_true",
                      help="run on a --db that already holds sessions (the demo's own are recreated)")
    demo.add_argument("--processes", type=int, choices=(1, 2), default=1,
                      help="2: the manager served by this process, the human recorded by a second one")

    status = commands.add_parser("status", help="a session's state version and changes")
    status.add_argument("key", help="session key, e.g. agent:main:main")
    status.add_argument("--changes-since", type=int, default=None, metavar="N")
    status.add_argument("--agent", default=None, help="agent id, for keys that are not agent-qualified")
    status.add_argument("--db", default=None, help="database URL or file (default: the embedded default)")
    status.add_argument("--json", action="store_true", help="print the session_status JSON")

    vacuum = commands.add_parser(
        "vacuum", help="rewrite the database compactly (SQLite: and switch it to incremental auto-vacuum)"
    )
    vacuum.add_argument("--db", default=None, help="database URL or file (default: the embedded default)")

    diagram = commands.add_parser("diagram", help="the protocol's state diagram, generated from the machine")
    diagram.add_argument("--write", type=Path, default=None, metavar="FILE", help="write Markdown to FILE")

    model = commands.add_parser("model", help="the protocol as a model for an external checker, generated from the table")
    model.add_argument("--promela", action="store_true", required=True,
                       help="write the Promela model for SPIN (the only format so far)")
    model.add_argument("--write", type=Path, default=None, metavar="FILE",
                       help="write it to FILE (default: print it; the committed copy is spec/notice-protocol.pml)")

    schemas = commands.add_parser("schemas", help="the session tools' JSON Schemas (what agents are handed)")
    schemas.add_argument("--write", type=Path, default=None, metavar="DIR", help="write <tool>.json files into DIR")

    mcp = commands.add_parser("mcp", help="serve one session's tools and notices to an MCP client over stdio")
    mcp.add_argument("--session", required=True, metavar="KEY",
                     help="the calling session, e.g. agent:main:main (or main, as the tools read keys)")
    mcp.add_argument("--db", default=None, help="database URL or file (default: the embedded default)")
    mcp.add_argument("--profile", default="coding", choices=["coding", "messaging"], help="tool profile (default: coding)")
    mcp.add_argument("--visibility", default="tree", choices=["self", "tree", "agent", "all"],
                     help="which sessions the tools may name (default: tree)")
    mcp.add_argument("--agent-to-agent", action="store_true", help="with --visibility all: other agents' sessions too")
    mcp.add_argument("--max-spawn-depth", type=int, default=1, metavar="N", help="sub-agent depth limit (default: 1)")
    mcp.add_argument("--poll-interval", type=float, default=0.2, metavar="SECONDS",
                     help="how often notices from other processes are looked for (default: 0.2)")

    from .cli_operator import add_parsers as add_operator_parsers

    add_operator_parsers(commands)

    check = commands.add_parser("check", help="model check with real-store replay, fuzz, SPIN (exit 1 on failure)")
    from ..verify.runner import add_arguments as add_check_arguments

    add_check_arguments(check)

    conformance = commands.add_parser(
        "conformance", help="check an implementation behind an adapter against the spec (exit 1 on a violation)")
    conformance.add_argument("--adapter", help="the adapter's command line (default: this project's own Gateway)")
    conformance.add_argument("--examples", type=int, default=60, help="runs per search (default: 60)")
    conformance.add_argument("--steps", type=int, default=25, help="steps per run at most (default: 25)")
    conformance.add_argument("--max-findings", type=int, default=8, help="stop after this many findings (default: 8)")
    conformance.add_argument("--json", action="store_true", help="the report as JSON")
    conformance.add_argument("--openclaw", action="store_true",
                             help="check the published reference (installed with --install-openclaw)")
    conformance.add_argument("--install-openclaw", action="store_true",
                             help="install Node 24 and the pinned openclaw into the cache, then exit")

    replay = commands.add_parser("replay", help="check protocol traces against the spec (exit 1 on a violation)")
    from ..verify.trace_cli import add_arguments as add_replay_arguments

    add_replay_arguments(replay)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            if args.processes == 2:
                from .demo.processes import run_demo_processes

                return run_demo_processes(args.db, reuse=args.reuse)
            from .demo.story import run_demo

            return run_demo(args.db, reuse=args.reuse)
        if args.command == "status":
            return _status(args)
        if args.command == "vacuum":
            return _vacuum(args)
        if args.command == "schemas":
            return _schemas(args)
        if args.command == "model":
            return _model(args)
        if args.command == "mcp":
            return _mcp(args)
        if args.command in {"sessions", "watchers", "tail", "prune", "adopt"}:
            from .cli_operator import run as run_operator_command

            return run_operator_command(args)
        if args.command == "check":
            from ..verify.runner import run_check

            return run_check(args)
        if args.command == "conformance":
            return _conformance(args)
        if args.command == "replay":
            from ..verify.trace_cli import run_replay

            return run_replay(args)
        return _diagram(args)
    except SessionStateError as exc:
        print(f"sessionstate: {exc.code}: {exc.message}", file=sys.stderr)
        return 2


def _model(args: argparse.Namespace) -> int:
    from ..verify.promela import generate

    text = generate()
    if args.write is None:
        sys.stdout.write(text)
    else:
        args.write.write_text(text)
        print(f"wrote {args.write}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from ..facade.gateway import Gateway

    # Reading creates no file, no directory, and prunes nothing (R30: a reading command).
    with Gateway.open(args.db, create=False, auto_prune=False) as gw:
        result = gw.session_status(args.key, changes_since=args.changes_since, agent_id=args.agent)
        watchers = gw.ops.watchers_of(args.key, target_agent_id=args.agent)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['sessionKey']}: stateVersion {result['stateVersion']}")
    for watcher, cursor in watchers:  # provenance: spawn / explicit / ambient (R25)
        last, notified, material = cursor
        print(f"  watched by {watcher} ({cursor.provenance}): last seen {last}, notified {notified}, material {material}")
    changes: dict[str, Any] | None = result.get("stateChanges")
    if changes is not None:
        if changes["historyGap"]:
            print("historyGap: the requested version is older than the retained history; refresh the whole session")
        for event in changes["events"]:
            actor = f" ({event['actorId']})" if "actorId" in event else ""
            print(f"  {event['sequence']:>8}  {event['occurredAt']}  {event['kind']:<22} {event['actorType']}{actor}: {event['summary']}")
        if changes["truncated"]:
            print(f"  ... more after {changes['events'][-1]['sequence']}")
    return 0


def _vacuum(args: argparse.Namespace) -> int:
    from ..statemachine import NOTIFYING_KINDS
    from ..store import open_store

    # create=False: vacuuming a database that is not there creates nothing.
    store = open_store(normalize_url(args.db), notifying_kinds=NOTIFYING_KINDS, create=False)
    try:
        report = store.vacuum()
    finally:
        store.close()
    print(f"vacuumed {store.where}: {_mb(report.bytes_before)} -> {_mb(report.bytes_after)} ({report.detail})")
    return 0


def _mb(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB"


def _schemas(args: argparse.Namespace) -> int:
    from ..tools.schemas import TOOL_SCHEMAS, export_schemas

    if args.write is None:
        print(json.dumps(TOOL_SCHEMAS, indent=2, sort_keys=True, ensure_ascii=False))
    else:
        for path in export_schemas(args.write):
            print(f"wrote {path}")
    return 0


def _mcp(args: argparse.Namespace) -> int:
    try:
        from .mcp import serve_stdio
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in {"mcp", "mcp_types"}:
            raise
        print("sessionstate: missing_dependency: the MCP server needs the mcp extra:"
              " pip install 'sessionstate[mcp]'", file=sys.stderr)
        return 2
    from ..facade.gateway import Gateway
    from ..shared.policy import ToolPolicy

    policy = ToolPolicy(visibility=args.visibility, agent_to_agent=args.agent_to_agent,
                        profile=args.profile, max_spawn_depth=args.max_spawn_depth)
    from .mcp.command import exit_on_interrupt, resolve_session_argument

    with Gateway.open(args.db, create=False) as gw:  # the session must exist, so must the file
        gw.configure_tools(policy)
        session = resolve_session_argument(gw, args.session)
        exit_on_interrupt(lambda: gw.runs.stop_runs(timeout=1.0))
        try:
            serve_stdio(gw, session, poll_interval=args.poll_interval)
        finally:
            gw.runs.stop_runs()  # runs live in this process: end them before the database closes
    return 0


def _diagram(args: argparse.Namespace) -> int:
    from ..statemachine.diagram import diagram_markdown, mermaid

    if args.write is None:
        print(mermaid(), end="")
    else:
        args.write.write_text(diagram_markdown(), encoding="utf-8")
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


def _conformance(args: argparse.Namespace) -> int:
    import shlex

    try:
        from ..conformance.kit import run
    except ModuleNotFoundError as exc:  # the kit is a Hypothesis state machine
        if exc.name != "hypothesis":
            raise
        print("sessionstate conformance needs Hypothesis: pip install 'sessionstate[conformance]'", file=sys.stderr)
        return 2

    if args.install_openclaw or args.openclaw:
        from ..conformance import openclaw_install

        if args.install_openclaw:
            try:
                done = openclaw_install.install()
            except openclaw_install.InstallError as exc:
                print(f"sessionstate conformance: {exc}", file=sys.stderr)
                return 2
            took = "already installed" if done["cached"] else f"installed in {done['seconds']} s"
            print(f"openclaw {done['openclaw']} and Node {done['node']} in {openclaw_install.cache_dir()} ({took})")
            return 0
        reason = openclaw_install.installed()
        if reason:
            print(f"sessionstate conformance: {reason}", file=sys.stderr)
            return 2
        command = openclaw_install.adapter_command()
    else:
        command = shlex.split(args.adapter) if args.adapter else [sys.executable, "-m", "sessionstate.conformance.gateway_adapter"]
    report = run(command, examples=args.examples, steps=args.steps, max_findings=args.max_findings)
    print(json.dumps(report.as_json(), indent=2) if args.json else report.text())
    return 1 if report.violations else 0
