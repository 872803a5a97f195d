"""The operator commands: ``sessions`` (list, create), ``watchers KEY``, ``tail``, ``prune``, and
``adopt`` (cli_adopt.py).

Each opens the database through ``Gateway.open`` like every command; only ``sessions create``
may create it. Errors are ``SessionStateError``s, printed as one line by cli.main (exit 2).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from ..errors import InvalidArgument
from ..shared.timefmt import iso_millis

DB_HELP = "database URL or file (default: the embedded default)"


def add_parsers(commands: Any) -> None:
    sessions = commands.add_parser("sessions", help="list the sessions, or create one (sessions create KEY)")
    sessions.add_argument("--db", default=None, help=DB_HELP)
    sessions.add_argument("--json", action="store_true", help="one JSON object per session")
    actions = sessions.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser("list", help="the sessions, oldest first (the default)")
    listing.add_argument("--db", default=argparse.SUPPRESS, help=DB_HELP)
    listing.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="JSON lines")
    create = actions.add_parser("create", help="register a session (creates the database when missing)")
    create.add_argument("key", help="session key, e.g. agent:main:main")
    create.add_argument("--kind", default="main", help="the session kind (default: main; subagent for a child)")
    create.add_argument("--parent", default=None, metavar="KEY",
                        help="the spawning session: a spawn edge, the parent watches the new session")
    create.add_argument("--agent", default=None, metavar="ID", help="agent id, for keys that are not agent-qualified")
    create.add_argument("--label", default=None, help="a label for the session")
    create.add_argument("--db", default=argparse.SUPPRESS, help=DB_HELP)

    watchers = commands.add_parser("watchers", help="each target a session watches: state, positions, lag, lead")
    watchers.add_argument("key", help="the watcher's session key (main: agent:main:main)")
    watchers.add_argument("--db", default=None, help=DB_HELP)
    watchers.add_argument("--json", action="store_true", help="one JSON object per pair")
    _retention_arguments(watchers)

    tail = commands.add_parser("tail", help="follow notices, events and wakes live, from every process")
    tail.add_argument("--db", default=None, help=DB_HELP)
    tail.add_argument("--json", action="store_true", help="one JSON object per line, for scripts")
    tail.add_argument("--poll", type=float, default=0.25, metavar="SECONDS",
                      help="the longest wait between checks (default: 0.25)")

    prune = commands.add_parser("prune", help="what pruning would remove now; --apply removes it")
    prune.add_argument("--db", default=None, help=DB_HELP)
    prune.add_argument("--apply", action="store_true", help="prune (default: only show what would go)")
    prune.add_argument("--json", action="store_true", help="print the plan (and the counts) as JSON")
    _retention_arguments(prune)

    from .cli_adopt import add_parser as add_adopt_parser

    add_adopt_parser(commands, DB_HELP)


def _retention_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--retention-days", type=float, default=30.0, metavar="DAYS",
                        help="the retention window the gateway runs with (default: 30)")
    parser.add_argument("--max-rows", type=int, default=50_000, metavar="N",
                        help="the event row cap the gateway runs with (default: 50000)")


def run(args: argparse.Namespace) -> int:
    return {"sessions": _sessions, "watchers": _watchers, "tail": _tail, "prune": _prune,
            "adopt": _adopt}[args.command](args)


def _adopt(args: argparse.Namespace) -> int:
    from .cli_adopt import run as run_adopt

    gateway = _open(args)
    try:
        return int(run_adopt(args, gateway))
    finally:
        gateway.close()


def _open(args: argparse.Namespace, *, create: bool = False) -> Any:
    """A gateway that may write (startup sweep included), for ``sessions create`` and ``prune``;
    it prunes only when asked (``prune --apply``), never by itself at open (R30): a dry run
    changes nothing."""
    from ..facade.gateway import Gateway

    return Gateway.open(args.db, create=create, retention_days=getattr(args, "retention_days", 30),
                        max_rows=getattr(args, "max_rows", 50_000), auto_prune=False)


def _observe(args: argparse.Namespace) -> Any:
    """A gateway that only looks (operator.observe): no sweep, no file created."""
    from .operator import observe

    return observe(args.db, retention_days=getattr(args, "retention_days", 30),
                   max_rows=getattr(args, "max_rows", 50_000))


# -- sessions --------------------------------------------------------------------------------


def _sessions(args: argparse.Namespace) -> int:
    if args.action == "create":
        from .operator import resolve_session_argument

        with _open(args, create=True) as gw:
            parent = None if args.parent is None else resolve_session_argument(gw, args.parent, "--parent")
            gw.create_session(args.key, agent_id=args.agent, kind=args.kind, parent=parent, label=args.label)
            agent = gw.ops.resolve(args.key, args.agent)[1]
            watched = ""
            if parent is not None:  # R3: only an agent-qualified parent holds a cursor
                held = gw.ops.cursor_positions(parent, args.key, target_agent_id=agent) is not None
                watched = f"; child of {parent}" + (", which watches it" if held else " (which holds no cursor: not agent-qualified)")
            print(f"created {args.key} (kind {args.kind}, agent {agent}) in {gw.store.where}{watched}")
        return 0
    with _observe(args) as gw:
        with gw.locked() as store:
            rows = [(s, store.head(s.session_key, s.agent_id)) for s in store.list_sessions()]
    for session, head in rows:
        version = head.last_sequence if head else 0
        parent = session.parent_key
        if args.json:
            print(json.dumps({"key": session.session_key, "agentId": session.agent_id, "kind": session.kind,
                              "parent": parent, "label": session.label, "stateVersion": version,
                              "createdAt": iso_millis(session.created_at),
                              "updatedAt": iso_millis(session.updated_at)}, ensure_ascii=False))
        else:
            extra = (f"  parent {parent}" if parent else "") + (f"  label {session.label!r}" if session.label else "")
            print(f"{session.session_key:<40} {session.agent_id:<8} {session.kind:<8} v{version:<6}"
                  f" created {iso_millis(session.created_at)}{extra}")
    if not args.json:
        print(f"{len(rows)} session(s)")
    return 0


# -- watchers --------------------------------------------------------------------------------


def _watchers(args: argparse.Namespace) -> int:
    from .operator import last_wakes, resolve_session_argument, watcher_pairs

    with _observe(args) as gw:
        watcher = resolve_session_argument(gw, args.key, "watcher key")
        pairs = watcher_pairs(gw, watcher)
        woken = last_wakes(gw).get(watcher)
    if args.json:
        for pair in pairs:
            print(json.dumps({**pair.as_json(), "lastWake": None if woken is None else iso_millis(woken)},
                             ensure_ascii=False))
        return 0
    wake = "never woken" if woken is None else f"last woken {iso_millis(woken)}"
    print(f"{watcher}: watches {len(pairs)} target(s); {wake}")
    for p in pairs:
        behind = f"{p.behind}{'+' if p.behind_capped else ''} behind"
        if p.history_gap:
            lead = "history gap: unread events already pruned"
        elif p.lead_events is None:
            lead = "nothing unread"
        else:
            lead = f"lead {p.lead_events} events / {p.lead_seconds / 86_400:.1f} days"  # type: ignore[operator]
        print(f"  {p.target_key:<40} {p.state:<18} L/N/M {p.last_seen}/{p.notified}/{p.material}"
              f"  head {p.head}  {behind}  {lead}")
        if p.owed_notice:
            print(f"    owes: {p.owed_notice}")
    return 0


# -- tail ------------------------------------------------------------------------------------


def _tail(args: argparse.Namespace) -> int:
    from .tail import follow, printer

    if not 0 < args.poll <= 60:
        raise InvalidArgument(f"--poll must be in (0, 60] seconds, got {args.poll}")
    interrupted: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        interrupted.append(signum)

    with _observe(args) as gw:
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        def following() -> None:  # printed once the feed is open: scripts wait for this line
            print(f"sessionstate tail: following {gw.store.where} (Ctrl-C ends)", file=sys.stderr, flush=True)

        try:
            follow(gw, printer(args.json), poll=args.poll, stop=lambda: bool(interrupted), ready=following)
        except BrokenPipeError:  # `tail | head`: the reader is gone
            return 0
    return 128 + interrupted[0] if interrupted else 0


# -- prune -----------------------------------------------------------------------------------


def _prune(args: argparse.Namespace) -> int:
    from .operator import prune_plan

    # The dry run only looks; --apply opens as a gateway does (its startup sweep included).
    with (_open(args) if args.apply else _observe(args)) as gw:
        plan = prune_plan(gw)
        counts = gw.prune() if args.apply else None
    if args.json:
        print(json.dumps({"plan": plan.as_json(), "pruned": counts}, ensure_ascii=False))
        return 0
    verb = "removed" if args.apply else "would remove"
    print(f"retention {args.retention_days:g} days (cutoff {iso_millis(plan.cutoff)}), row cap {plan.max_rows}")
    print(f"events: {plan.events_total} retained; {verb} {plan.events_to_remove}"
          f" ({plan.events_past_retention} past the retention window, {plan.events_over_row_cap} over the row cap)")
    print(f"idle cursors: {verb} {len(plan.cursors_to_expire)}")
    for watcher, target, _agent in plan.cursors_to_expire:
        print(f"  {watcher} -> {target}")
    print(f"unread history cut (historyGap on the next changesSince): {len(plan.gaps_opened)} pair(s)")
    for watcher, target, _agent in plan.gaps_opened:
        print(f"  {watcher} -> {target}")
    if counts is not None:
        print(f"pruned: {counts}")
    else:
        print("dry run: nothing changed; --apply prunes")
    return 0
