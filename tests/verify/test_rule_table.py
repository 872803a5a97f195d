"""docs/verification.md's table of spec rules names every rule of spec/notice-protocol.md."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULE = re.compile(r"\b(R\d+|INV\d+|LIV\d+|WAKE\d+)\b")


def table_rules(doc: str) -> set[str]:
    section = doc.split("## Spec rules against the checkers", 1)[1].split("\n## ", 1)[0]
    return {m.group(1) for line in section.splitlines() if (m := re.match(r"\| (\S+) \|", line))}


def test_the_rule_table_names_every_rule_of_the_spec():
    spec = set(RULE.findall((ROOT / "spec/notice-protocol.md").read_text()))
    named = table_rules((ROOT / "docs/verification.md").read_text())
    assert spec - named == set(), sorted(spec - named)
    assert named - spec <= {"rule", "---"}


def test_a_rule_missing_from_the_table_is_found():
    doc = (ROOT / "docs/verification.md").read_text()
    assert "R7" in table_rules(doc)
    assert "R7" not in table_rules(re.sub(r"^\| R7 \|.*$", "", doc, flags=re.M))
