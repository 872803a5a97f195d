"""``sessionstate adopt PROVIDER THREAD``: adopt an upstream session into a gateway database.

Creates the session (``agent:<agent>:adopted:<provider>:<thread>`` unless ``--key`` names one),
records ``adopted``, links it to the upstream thread primed at its current end, and lets
``--watcher`` watch it. The provider is built from the options: ``--claude-root`` for
``claude-jsonl``, ``--codex`` (the executable; the app server is started for the priming check)
for ``codex``, ``--opencode`` for ``opencode``, the environment (Pi's own variables) for ``pi``.
A paired node is adopted by the embedder that holds the node's client, not from here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import InvalidArgument

ADOPTABLE = ("claude-jsonl", "codex", "opencode", "pi")


def add_parser(commands: Any, db_help: str) -> None:
    adopt = commands.add_parser("adopt", help="adopt an upstream session (Claude Code, Codex, OpenCode, Pi)")
    adopt.add_argument("provider", choices=ADOPTABLE, help="the upstream tool")
    adopt.add_argument("thread", help="the upstream session or thread id")
    adopt.add_argument("--db", default=None, help=db_help)
    adopt.add_argument("--key", default=None, help="the gateway session key (default: agent:<agent>:adopted:...)")
    adopt.add_argument("--agent", default=None, metavar="ID", help="the owning agent (default: main)")
    adopt.add_argument("--watcher", default=None, metavar="KEY", help="a session that watches the adopted one")
    adopt.add_argument("--continue", dest="continue_session", action="store_true",
                       help="link an existing session (--key) again instead of creating one")
    adopt.add_argument("--claude-root", type=Path, default=None, help="Claude Code's projects directory")
    adopt.add_argument("--codex", default="codex", help="the codex executable (default: codex on PATH)")
    adopt.add_argument("--opencode", default="opencode", help="the opencode executable (default: opencode on PATH)")
    adopt.add_argument("--json", action="store_true", help="the adoption as one JSON object")


def build_provider(args: argparse.Namespace) -> Any:
    from ..upstream.providers import ClaudeJsonlProvider, CodexAppServerProvider, OpenCodeProvider, PiSessionProvider

    if args.provider == "claude-jsonl":
        return ClaudeJsonlProvider(args.claude_root)
    if args.provider == "codex":
        return CodexAppServerProvider(codex=args.codex)
    if args.provider == "opencode":
        return OpenCodeProvider(args.opencode)
    return PiSessionProvider()


def run(args: argparse.Namespace, gateway: Any) -> int:
    from ..upstream.adoption import Adopter
    from ..upstream.catalog import CatalogEntry

    provider = build_provider(args)
    try:
        adopter = Adopter(gateway, {args.provider: provider})
        entry = CatalogEntry(args.provider, args.thread)
        if args.continue_session:
            if args.key is None:
                raise InvalidArgument("--continue needs --key (the session to link again)")
            adoption = adopter.continue_session(entry, args.key, agent_id=args.agent, watcher=args.watcher)
        else:
            adoption = adopter.adopt(entry, agent_id=args.agent, session_key=args.key, watcher=args.watcher)
    finally:
        close = getattr(provider, "close", None)
        if close is not None:
            close()
    facts = {"sessionKey": adoption.session_key, "agentId": adoption.agent_id, "provider": args.provider,
             "thread": args.thread, "generation": adoption.generation, "primed": adoption.primed,
             "created": adoption.created}
    if args.json:
        print(json.dumps(facts))
    else:
        state = "primed at the thread's end" if adoption.primed else "not primed yet (the monitor will)"
        verb = "adopted" if adoption.created else "linked again"
        print(f"{verb} {args.provider} {args.thread} as {adoption.session_key} (agent {adoption.agent_id}), {state}")
    return 0
