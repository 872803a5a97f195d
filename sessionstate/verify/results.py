"""Machine-readable results of ``sessionstate check`` and ``sessionstate replay``.

A :class:`Results` collects one :class:`Case` per part and per checked property (INV…, LIV…,
R…) and writes them as JUnit XML (``--junit-xml``, what CI systems show as test results) and
a JSON summary (``--json``: state counts, examples, seeds, times). The runner stays a text
report: it only tells the collector which part runs (:meth:`Results.part`), adds figures
(:meth:`Results.stat`) and hands over its failure strings, which name their rule.
"""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# What the model check verifies in every explored state (invariants.py, modelcheck.py,
# wakemodel.py): one JUnit case each. AGREE: reference and machine path observe the same.
MODELCHECK_PROPERTIES = ("AGREE", "INV1", "INV2", "INV3", "INV4", "INV5", "INV7", "INV8", "INV10", "INV11",
                         "LIV1", "R12", "R26", "LIVENESS")
RULE = re.compile(r"\b(INV\d+|LIV\d+|R\d+|AGREE|LIVENESS|MACHINE|T\d+)\b")


def rules_in(text: str) -> list[str]:
    """The rule names a failure message mentions, in order, once each."""
    seen: list[str] = []
    for name in RULE.findall(text):
        if name not in seen:
            seen.append(name)
    return seen


@dataclass
class Case:
    part: str
    name: str
    seconds: float = 0.0
    failure: str | None = None
    skipped: str | None = None
    report: str | None = None  # path of the Markdown counterexample report

    @property
    def ok(self) -> bool:
        return self.failure is None


@dataclass
class Results:
    command: str = "check"
    seed: int | None = None
    cases: list[Case] = field(default_factory=list)
    stats: dict[str, dict[str, object]] = field(default_factory=dict)
    reports: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    _current: str | None = None

    def part(self, name: str, run: Callable[[], list[str]], properties: tuple[str, ...] = ()) -> list[str]:
        """Run one part; record a case for it and, when it checks named properties, one per
        property (a failure goes to the property its message names, the others are skipped
        when the part stopped at the first violation)."""
        self._current = name
        started = time.monotonic()
        try:
            failures = run()
        finally:
            self._current = None
        seconds = time.monotonic() - started
        self.stats.setdefault(name, {})["seconds"] = round(seconds, 3)
        report = self.reports[-1] if self.reports and failures and self.stats[name].get("report") else None
        text = "\n\n".join(failures) or None
        self.cases.append(Case(name, name, seconds, text, report=report))
        if properties:
            broken = {r for f in failures for r in rules_in(f.split("replay:")[0])}
            for prop in properties:
                if prop in broken:
                    self.cases.append(Case(name, prop, 0.0, text, report=report))
                elif failures:
                    self.cases.append(Case(name, prop, skipped="the search stopped at the first violation"))
                else:
                    self.cases.append(Case(name, prop))
        return failures

    def stat(self, **figures: object) -> None:
        """Figures of the running part for the JSON summary (states, examples, …)."""
        self.stats.setdefault(self._current or "check", {}).update(figures)

    def add_report(self, path: Path) -> None:
        self.reports.append(str(path))
        self.stat(report=str(path))

    # -- output -----------------------------------------------------------------------------

    def junit(self) -> ET.Element:
        suites = ET.Element("testsuites", name=f"sessionstate {self.command}")
        by_part: dict[str, list[Case]] = {}
        for case in self.cases:
            by_part.setdefault(case.part, []).append(case)
        for part, cases in by_part.items():
            suite = ET.SubElement(
                suites, "testsuite", name=f"sessionstate.{self.command}.{part}", tests=str(len(cases)),
                failures=str(sum(not c.ok for c in cases)), skipped=str(sum(c.skipped is not None for c in cases)),
                time=f"{sum(c.seconds for c in cases):.3f}")
            for case in cases:
                element = ET.SubElement(suite, "testcase", classname=f"sessionstate.{self.command}.{part}",
                                        name=case.name, time=f"{case.seconds:.3f}")
                if case.failure is not None:
                    lines = case.failure.strip().splitlines() or [case.name]
                    first = next((ln.strip() for ln in lines if "violated:" in ln or "VIOLATION" in ln), lines[0])
                    message = f"{case.name}: {first}" + (f" (report: {case.report})" if case.report else "")
                    failure = ET.SubElement(element, "failure", message=message, type=case.name)
                    failure.text = case.failure + (f"\n\ncounterexample report: {case.report}" if case.report else "")
                elif case.skipped is not None:
                    ET.SubElement(element, "skipped", message=case.skipped)
            if self.seed is not None:
                props = ET.SubElement(suite, "properties")
                ET.SubElement(props, "property", name="seed", value=str(self.seed))
        return suites

    def write_junit(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tree = ET.ElementTree(self.junit())
        ET.indent(tree)
        tree.write(path, encoding="utf-8", xml_declaration=True)

    def summary(self) -> dict[str, object]:
        return {
            "command": self.command,
            "ok": all(c.ok for c in self.cases),
            "seed": self.seed,
            "seconds": round(time.time() - self.started, 3),
            "parts": self.stats,
            "cases": [{"part": c.part, "name": c.name, "ok": c.ok, "skipped": c.skipped is not None,
                       "seconds": round(c.seconds, 3), "failure": c.failure, "report": c.report}
                      for c in self.cases],
            "reports": self.reports,
        }

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.summary(), indent=2) + "\n")


_ACTIVE: list[Results] = []


def active() -> Results | None:
    """The collector of the running command (None: nobody asked for results)."""
    return _ACTIVE[-1] if _ACTIVE else None


def push(rec: Results) -> None:
    _ACTIVE.append(rec)


def pop(rec: Results) -> None:
    _ACTIVE.remove(rec)


def stat(**figures: object) -> None:
    if _ACTIVE:
        _ACTIVE[-1].stat(**figures)
