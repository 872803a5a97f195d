"""Hypothesis: ragged appends and random checks never lose or double a human turn.

The machine writes transcript lines to a real file in random byte pieces
(mid-line and mid-UTF-8 character included), checks at random moments with a
small scan cap (so long lines are streamed across checks), sometimes through
a fresh provider that only has the marker (a gateway restart). A shadow model
knows which human lines are complete on disk; every check may only report
those, each exactly once, with the right text.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from hypothesis import event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sessionstate.upstream.claude_lines import TEXT_PREFIX_CHARS
from sessionstate.upstream.providers import CheckStatus, ClaudeJsonlProvider
from tests.upstream.jsonl_fixtures import TranscriptBuilder, append_bytes, encode

_alphabet = st.sampled_from(list("ab c\t\n\"\\/é€ß😀字") + ["\u0301", "\x01"])
_texts = st.text(_alphabet, max_size=30) | st.builds(
    lambda piece, n: piece * n, st.text(_alphabet, min_size=1, max_size=4), st.integers(100, 700)
)
_KINDS = ["human", "blocks", "tool_result", "assistant", "compaction", "sidechain", "system", "garbage", "blank"]


class JsonlAppendMachine(RuleBasedStateMachine):
    @initialize(cap=st.integers(48, 700))
    def setup(self, cap: int) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="jsonl-machine-"))
        self.builder = TranscriptBuilder("0b6c7e52-1f3a-4d2e-8c9b-5a4f3e2d1c0b")
        self.path = self.builder.path_under(self.tmp)
        self.path.touch()
        self.cap = cap
        self.provider = ClaudeJsonlProvider(self.tmp, scan_cap_bytes=cap)
        self.pending = b""  # encoded but not yet on disk
        self.written = 0
        self.planned = 0  # bytes encoded so far (written + pending)
        self.humans: dict[str, tuple[int, str]] = {}  # uuid -> (line end offset, text)
        self.human_order: list[str] = []
        self.found: list[str] = []
        self.marker: str | None = None

    def teardown(self) -> None:
        # Every run ends with the whole file written and scanned to its end.
        try:
            self.write_all_and_drain()
            event(f"human turns found: {'0' if not self.found else '1-5' if len(self.found) <= 5 else '>5'}")
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(kind=st.sampled_from(_KINDS), text=_texts)
    def add_line(self, kind: str, text: str) -> None:
        b = self.builder
        if kind == "human":
            line = b.user_prompt(text)
        elif kind == "blocks":
            line = b.user_text_blocks(text, "second block")
            text = text + "\nsecond block"
        elif kind == "tool_result":
            line = b.tool_result("toolu_1", text)
        elif kind == "assistant":
            line = b.assistant_text(text)
        elif kind == "compaction":
            line = b.compaction()
        elif kind == "sidechain":  # a sub-agent's prompt: never reported, long or short
            line = b.sidechain_prompt(text)
        else:
            line = b.system(content=text)
        raw = encode(line)
        if kind == "garbage":
            raw = raw[: len(raw) // 2] + b"\n"
        elif kind == "blank":
            raw = b"\n"
        self.pending += raw
        self.planned += len(raw)
        if kind in ("human", "blocks"):
            self.humans[line["uuid"]] = (self.planned, text)
            self.human_order.append(line["uuid"])
        note(f"add {kind} ({len(raw)} bytes)")

    @precondition(lambda self: bool(self.pending))
    @rule(data=st.data())
    def write_piece(self, data: st.DataObject) -> None:
        size = data.draw(st.integers(1, len(self.pending)), label="piece")
        append_bytes(self.path, self.pending[:size])
        self.pending = self.pending[size:]
        self.written += size

    @rule(restart=st.booleans())
    def check(self, restart: bool) -> None:
        if restart:
            self.provider = ClaudeJsonlProvider(self.tmp, scan_cap_bytes=self.cap)
        result = self.provider.check(self.builder.session_id, self.marker)
        assert result.status is CheckStatus.FOUND, result.detail
        assert result.marker is not None
        offset = json.loads(result.marker)["off"]
        assert offset <= self.written
        if json.loads(result.marker).get("line"):
            event("mid-line (streaming) marker")
        for activity in result.activities:
            assert activity.activity_id in self.humans, "reported a line that is not a human turn"
            end, text = self.humans[activity.activity_id]
            assert end <= self.written, "classified a line before its newline was written"
            if activity.text_truncated:
                assert len(activity.text) == TEXT_PREFIX_CHARS and text.startswith(activity.text)
            else:
                assert activity.text == text
            self.found.append(activity.activity_id)
        note(f"check -> {len(result.activities)} found, marker offset {offset}")
        self.marker = result.marker

    @invariant()
    def each_found_once(self) -> None:
        assert len(self.found) == len(set(self.found))

    @rule()
    def write_all_and_drain(self) -> None:
        append_bytes(self.path, self.pending)
        self.written += len(self.pending)
        self.pending = b""
        for _ in range(10 * (self.written // self.cap + 2)):
            before = self.marker
            self.check(restart=False)
            if self.marker == before:
                break
        assert self.found == self.human_order
        assert json.loads(self.marker or "{}")["off"] == self.written


JsonlAppendMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=60, deadline=None
)
TestJsonlAppends = JsonlAppendMachine.TestCase
