"""Parse the tables of spec/notice-protocol.md (the tests compare them with the code)."""

from __future__ import annotations

import re
from pathlib import Path

SPEC = Path(__file__).resolve().parents[2] / "spec" / "notice-protocol.md"


def section(title_prefix: str) -> str:
    text = SPEC.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title_prefix)}.*?$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"spec has no section starting {title_prefix!r}"
    return match.group(1)


def table_rows(title_prefix: str) -> list[list[str]]:
    """Body rows of the first Markdown table in a section, cells stripped of backticks."""
    rows = []
    for line in section(title_prefix).splitlines():
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        rows.append(cells)
    body = rows[2:]  # header and separator
    assert body, f"section {title_prefix!r} has an empty table"
    return body


def transition_rows() -> list[tuple[str, str, str, str]]:
    return [tuple(r) for r in table_rows("4. Transition table")]  # type: ignore[misc]


def kind_rows() -> list[tuple[str, bool, bool]]:
    """Section 8: (kind, notifies, seeds the parent's cursor)."""
    yes = {"yes": True, "no": False}
    return [(r[0], yes[r[1]], yes[r[2]]) for r in table_rows("8. Event kinds")]


def effect_rows() -> list[tuple[str, str, str]]:
    """Section 5: (effect, new positions, notice), as written."""
    return [(r[0], r[1], r[2]) for r in table_rows("5. Effects")]


def notice_template() -> str:
    block = re.search(r"```\n(.*?)\n```", section("9. Notice text"), re.S)
    assert block
    return block.group(1)
