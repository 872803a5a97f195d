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
* Sidechain lines (a sub-agent's prompts) are "other": never human.

``NodeThreadModel`` states the paired-node side: the node shows only the newest ``WINDOW``
items. A check that finds ``WINDOW`` or more new items since the last look (whether the thread
had items then or was empty, as at an empty adoption) cannot see where it left off: the human
items still visible become one activity flagged as a burst, the rest are lost; fewer new items
are each recorded on their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ECHO_WINDOW = 10
MISSES_BEFORE_DROP = 3
NODE_WINDOW = 50


@dataclass(frozen=True)
class Line:
    uid: str
    kind: str  # "human" | "echo" | "other" (assistant, tool output, compaction, sidechain)
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


@dataclass
class NodeThreadModel:
    """One paired-node thread and the activities the monitor must record for it.

    ``expected`` maps an activity id to ``(turns, burst flag)``: a single human item is
    ``(1, False)`` under its own id; a burst is ``(visible humans, True)`` under
    ``burst:<first visible human>..<last>``.
    """

    items: list[Line] = field(default_factory=list)
    seen: int = 0
    primed: bool = True
    expected: dict[str, tuple[int, bool]] = field(default_factory=dict)

    def adopt(self, history: list[Line], node_available: bool) -> None:
        self.items = list(history)
        self.primed = node_available
        self.seen = len(self.items) if node_available else 0

    def append(self, line: Line) -> None:
        self.items.append(line)

    def tick(self, node_available: bool) -> None:
        if not node_available:
            return  # an error: nothing recorded, nothing moves
        if not self.primed:
            self.primed = True
            self.seen = len(self.items)
            return
        new = self.items[self.seen:]
        if len(new) >= NODE_WINDOW:
            humans = [line.uid for line in self.items[-NODE_WINDOW:] if line.kind == "human"]
            if humans:
                self.expected[f"burst:{humans[0]}..{humans[-1]}"] = (len(humans), True)
        else:
            for line in new:
                if line.kind == "human":
                    self.expected[line.uid] = (1, False)
        self.seen = len(self.items)
