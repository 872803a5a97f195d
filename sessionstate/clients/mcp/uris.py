"""The notices resource's URI: ``sessionstate://sessions/<key>/notices``.

Pure string handling, no SDK import. The key is percent-encoded except for ``:`` (the
separator of agent-qualified keys), so ``agent:main:main`` reads as itself and a key holding
``/``, spaces or ``%`` still round-trips exactly.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import quote, unquote

NOTICES_URI_PREFIX: Final = "sessionstate://sessions/"
NOTICES_URI_SUFFIX: Final = "/notices"


def notices_uri(session_key: str) -> str:
    """The URI of ``session_key``'s notices resource."""
    return f"{NOTICES_URI_PREFIX}{quote(session_key, safe=':')}{NOTICES_URI_SUFFIX}"


def session_of_notices_uri(uri: str) -> str | None:
    """The session key a notices URI names, or ``None`` when ``uri`` is no notices URI."""
    if not (uri.startswith(NOTICES_URI_PREFIX) and uri.endswith(NOTICES_URI_SUFFIX)):
        return None
    encoded = uri[len(NOTICES_URI_PREFIX): len(uri) - len(NOTICES_URI_SUFFIX)]
    if not encoded or "/" in encoded:
        return None
    try:
        key = unquote(encoded, errors="strict")
    except UnicodeDecodeError:
        return None
    # Only the canonical spelling names the resource: one URI per session.
    return key if notices_uri(key) == uri else None
