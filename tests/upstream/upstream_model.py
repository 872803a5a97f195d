"""A model of one adopted upstream thread and of what the monitor must make of it.

Imports nothing from ``sessionstate``: it states the expected behaviour directly.

* The upstream is a file of lines (or ``None`` while deleted); each line is a human turn, an
  echo of a gateway-side message, or something else (assistant, tool output, compaction).
* The link is ``present``/absent, has a ``generation``, a ``primed`` flag and a miss count.
* A tick with a working provider and a present link: file gone -> a miss (the third drops the
  link and emits one ``upstream_missing``); unprimed -> everything so far is history; otherwise
  every line after ``seen`` is classified: a human line, or an echo whose gateway message is no
  longer among the 10 latest, is expected to be recorded (once).
* A Continue starts a new generation primed at the current end (when the file exists).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ECHO_WINDOW = 10
MISSES_BEFORE_DROP = 3


@dataclass(frozen=True)
class Line:
    uid: str
    kind: str  # "human" | "echo" | "other"
    echo_of: int | None = None  # index into the gateway messages, for echoes


@dataclass
class UpstreamModel:
    file: list[Line] | None = field(default_factory=list)
    seen: int = 0
    gateway_messages: list[str] = field(default_factory=list)
    present: bool = True
    generation: int = 1
    primed: bool = True
    misses: int = 0
    expected: set[str] = field(default_factory=set)
    missing_emitted: int = 0

    # -- upstream changes --------------------------------------------------------------------

    def append(self, line: Line) -> None:
        assert self.file is not None
        self.file.append(line)

    def send_from_gateway(self, text: str) -> int:
        self.gateway_messages.append(text)
        return len(self.gateway_messages) - 1

    def delete(self) -> None:
        self.file = None
        self.seen = 0

    def recreate(self) -> None:
        self.file = []
        self.seen = 0

    # -- monitor and adoption ----------------------------------------------------------------

    def tick(self) -> None:
        if not self.present:
            return
        if self.file is None:
            self.misses += 1
            if self.misses >= MISSES_BEFORE_DROP:
                self.present = False
                self.missing_emitted += 1
            return
        self.misses = 0
        if not self.primed:
            self.primed = True
            self.seen = len(self.file)
            return
        latest = range(max(0, len(self.gateway_messages) - ECHO_WINDOW), len(self.gateway_messages))
        for line in self.file[self.seen:]:
            if line.kind == "human" or (line.kind == "echo" and line.echo_of not in latest):
                self.expected.add(line.uid)
        self.seen = len(self.file)

    def continue_session(self) -> None:
        self.present = True
        self.generation += 1
        self.misses = 0
        self.primed = self.file is not None
        self.seen = len(self.file) if self.file is not None else 0
