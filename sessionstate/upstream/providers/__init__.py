"""Upstream providers (one file each) and the registry the monitor uses.

Add a provider by writing a ``UpstreamProvider`` subclass in its own module
and listing it in ``PROVIDERS`` under its ``name``.
"""

from __future__ import annotations

from .base import (
    CheckResult,
    CheckStatus,
    UpstreamActivity,
    UpstreamProvider,
)
from .claude_jsonl import ClaudeJsonlProvider
from .codex_app_server import CodexAppServerProvider
from .opencode_cli import OpenCodeProvider
from .paired_node import (
    NodeTranscriptClient,
    NodeUnavailable,
    PairedNodeProvider,
)
from .pi_session import PiSessionProvider

#: Provider classes by ``name`` (the value stored in an upstream link).
PROVIDERS: dict[str, type[UpstreamProvider]] = {
    ClaudeJsonlProvider.name: ClaudeJsonlProvider,
    PairedNodeProvider.name: PairedNodeProvider,
    CodexAppServerProvider.name: CodexAppServerProvider,
    OpenCodeProvider.name: OpenCodeProvider,
    PiSessionProvider.name: PiSessionProvider,
}


def provider_class(name: str) -> type[UpstreamProvider]:
    """The provider class registered as ``name``; ``KeyError`` names the known ones."""
    try:
        return PROVIDERS[name]
    except KeyError:
        raise KeyError(f"unknown upstream provider {name!r}; known: {sorted(PROVIDERS)}") from None


__all__ = [
    "PROVIDERS",
    "CheckResult",
    "CheckStatus",
    "ClaudeJsonlProvider",
    "CodexAppServerProvider",
    "NodeTranscriptClient",
    "NodeUnavailable",
    "OpenCodeProvider",
    "PairedNodeProvider",
    "PiSessionProvider",
    "UpstreamActivity",
    "UpstreamProvider",
    "provider_class",
]
