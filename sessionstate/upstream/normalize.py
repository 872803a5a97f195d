"""Self-echo detection: is an upstream prompt just one we sent ourselves?

When the gateway drives an adopted session, its own prompts show up upstream
as user turns. They are not human activity. We recognise them by comparing
*normalised* text, because the upstream tool may re-encode or re-wrap what we
sent. ``normalize_prompt`` applies, in order:

1. Unicode NFC, so composed and decomposed forms ("é" vs "e" + U+0301) agree;
2. ``str.casefold`` (stronger than ``lower``: "Straße" and "STRASSE" agree);
3. NFC again, because case folding can leave a decomposed sequence behind;
4. every run of Unicode whitespace (spaces, tabs, newlines, NBSP, ...)
   collapsed to one ASCII space;
5. leading and trailing whitespace stripped.

Only the 10 latest gateway-side user messages count (the reference's v1
limit): an older message repeated by a human is treated as a real human turn.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

#: How many of the session's latest gateway-side user messages are compared.
ECHO_WINDOW = 10

_WHITESPACE_RUN = re.compile(r"\s+")


def normalize_prompt(text: str) -> str:
    """Return ``text`` in the comparison form described in the module docstring."""
    folded = unicodedata.normalize("NFC", unicodedata.normalize("NFC", text).casefold())
    return _WHITESPACE_RUN.sub(" ", folded).strip()


def is_self_echo(
    text: str,
    recent_gateway_user_messages: Sequence[str],
    *,
    truncated: bool = False,
) -> bool:
    """True when ``text`` equals one of the 10 latest gateway user messages.

    ``recent_gateway_user_messages`` is chronological (oldest first), so the
    last ``ECHO_WINDOW`` entries are the latest. When ``truncated`` is true,
    ``text`` is only a prefix of the upstream prompt (a provider could not
    hold the whole line); it then matches a message that *starts with* it.
    Its last base character and any marks after it are dropped first,
    because the cut may have split that character from further combining
    marks, which NFC would compose into a different character.
    """
    latest = list(recent_gateway_user_messages)[-ECHO_WINDOW:]
    if not latest:
        return False
    if not truncated:
        wanted = normalize_prompt(text)
        return any(normalize_prompt(message) == wanted for message in latest)
    prefix = normalize_prompt(_drop_last_base_char(text))
    if not prefix:
        # An all-whitespace prefix would "match" everything; refuse to guess.
        return False
    return any(normalize_prompt(message).startswith(prefix) for message in latest)


def _drop_last_base_char(text: str) -> str:
    """``text`` without its trailing combining marks and the base char they follow."""
    end = len(text)
    while end and unicodedata.category(text[end - 1]).startswith("M"):
        end -= 1
    return text[: max(end - 1, 0)]
