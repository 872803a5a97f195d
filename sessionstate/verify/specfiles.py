"""The spec, shipped inside the package: the protocol's text and its committed Promela model.

In a checkout ``sessionstate/spec`` is a link to the top-level ``spec/`` the maintainers edit; a
built wheel carries the files themselves, so the commands that read them work anywhere.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

SPEC_DIR = Path(str(files("sessionstate") / "spec"))
PROTOCOL = SPEC_DIR / "notice-protocol.md"  # the rules, the kinds table (section 8)
MODEL = SPEC_DIR / "notice-protocol.pml"  # the committed model SPIN checks
