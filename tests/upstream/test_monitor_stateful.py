"""Hypothesis: the monitor on a real Gateway against ``UpstreamModel`` and ``NodeThreadModel``.

``MonitorMachine`` adopts a real JSONL transcript (with history, or empty). Steps append human,
echo, sidechain and other lines (some in two writes, with ticks in between), delete and
re-create the transcript, send gateway-side messages, tick with a working, erroring or raising
provider, Continue the session (also racing a tick). Invariants: the recorded human activities
are exactly the model's (each once), the link exists iff the model says so, and there is at
most one ``upstream_missing`` per link generation.

``NodeMonitorMachine`` adopts a paired-node thread (empty or not, the node reachable or not)
and appends single items and bursts of up to 70 items between ticks, some while the node is
offline. Invariant: the recorded activities, with their turns and burst flags, are the model's.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sessionstate.services.notice.announce import created_line
from sessionstate.upstream.catalog import CatalogEntry
from sessionstate.upstream.catalog import LOCAL_HOST as HOST
from sessionstate.upstream.dedupe import activity_key
from sessionstate.upstream.monitor import UpstreamMonitor

from tests.upstream.jsonl_fixtures import append_bytes, encode
from tests.upstream.monitor_support import MANAGER, World, make_world
from tests.upstream.upstream_model import Line, NodeThreadModel, UpstreamModel

THREAD = "3c9e1f20-aaaa-4bbb-8ccc-0123456789ab"
ENTRY = CatalogEntry("claude-jsonl", THREAD)
# How an upstream tool may re-render our prompt: all equal after normalisation.
_RENDERINGS = [lambda t: t, str.upper, lambda t: f"  {t}\n", lambda t: t.replace(" ", "\t ")]


class MonitorMachine(RuleBasedStateMachine):
    @initialize(history=st.booleans())
    def setup(self, history: bool) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="monitor-machine-"))
        self.world: World = make_world(self.tmp)
        self.path = self.world.transcript(THREAD)
        b = self.world.builder(THREAD)
        if history:
            self.world.write(THREAD, b.summary(), b.user_prompt("history before adoption"))
        self.key = self.world.adopt_jsonl(THREAD)
        note(f"adopt the transcript {'with history' if history else 'empty'}")
        self.monitor: UpstreamMonitor = self.world.monitor()
        self.model = UpstreamModel()
        self.partial: tuple[bytes, Line] | None = None
        self.texts = 0

    def teardown(self) -> None:
        if hasattr(self, "world"):
            self.world.gw.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- upstream ------------------------------------------------------------------------------

    @precondition(lambda self: self.model.file is not None and self.partial is None)
    @rule(kind=st.sampled_from(["human", "other", "tool", "compaction", "sidechain"]))
    def append(self, kind: str) -> None:
        self.texts += 1
        b = self.world.builder(THREAD)
        if kind == "human":
            raw = b.user_prompt(f"human typed {self.texts}")
        elif kind == "tool":
            call, tool_id = b.assistant_tool_use("Bash", {"command": "ls"})
            append_bytes(self.path, encode(call))
            self.model.append(Line(str(call["uuid"]), "other"))
            raw = b.tool_result(tool_id, "README.md")
        elif kind == "compaction":
            raw = b.compaction()
        elif kind == "sidechain":
            raw = b.sidechain_prompt(f"sub-agent task {self.texts}")
        else:
            raw = b.assistant_text(f"assistant {self.texts}")
        append_bytes(self.path, encode(raw))
        self.model.append(Line(str(raw["uuid"]), "human" if kind == "human" else "other"))
        note(f"append {kind} {raw['uuid']}")

    @precondition(lambda self: self.model.file is not None and self.partial is None)
    @rule(cut=st.floats(0.05, 0.95))
    def start_partial_human_line(self, cut: float) -> None:
        self.texts += 1
        raw = self.world.builder(THREAD).user_prompt(f"slowly typed {self.texts}")
        data = encode(raw)
        at = max(1, int(len(data) * cut))
        append_bytes(self.path, data[:at])
        self.partial = (data[at:], Line(str(raw["uuid"]), "human"))
        note(f"partial human line {raw['uuid']}: {at} of {len(data)} bytes")

    @precondition(lambda self: self.partial is not None and self.model.file is not None)
    @rule()
    def finish_partial_human_line(self) -> None:
        assert self.partial is not None
        rest, line = self.partial
        append_bytes(self.path, rest)
        self.model.append(line)
        self.partial = None
        note(f"finish partial line {line.uid}")

    @precondition(lambda self: self.model.file is not None and self.partial is None)
    @rule(rendering=st.integers(0, len(_RENDERINGS) - 1), echoed=st.booleans())
    def gateway_sends(self, rendering: int, echoed: bool) -> None:
        text = f"gateway message {len(self.model.gateway_messages)}"
        self.world.echoes.append(text)
        index = self.model.send_from_gateway(text)
        if echoed:  # the upstream tool shows our prompt as a user line
            raw = self.world.builder(THREAD).user_prompt(_RENDERINGS[rendering](text))
            append_bytes(self.path, encode(raw))
            self.model.append(Line(str(raw["uuid"]), "echo", index))
        note(f"gateway sends {text!r} (echoed upstream: {echoed})")

    @rule(count=st.integers(1, 12))
    def gateway_sends_without_echo(self, count: int) -> None:
        for _ in range(count):
            text = f"gateway message {len(self.model.gateway_messages)}"
            self.world.echoes.append(text)
            self.model.send_from_gateway(text)
        note(f"gateway sends {count} message(s), none echoed")

    @precondition(lambda self: self.model.gateway_messages and self.model.file is not None and self.partial is None)
    @rule(back=st.sampled_from([9, 10]) | st.integers(0, 15), rendering=st.integers(0, len(_RENDERINGS) - 1))
    def upstream_shows_an_older_gateway_message(self, back: int, rendering: int) -> None:
        # Inside the 10 latest it is an echo; older, it counts as a human turn (v1 limit).
        index = max(0, len(self.model.gateway_messages) - 1 - back)
        raw = self.world.builder(THREAD).user_prompt(_RENDERINGS[rendering](self.model.gateway_messages[index]))
        append_bytes(self.path, encode(raw))
        self.model.append(Line(str(raw["uuid"]), "echo", index))
        note(f"upstream shows gateway message {index} of {len(self.model.gateway_messages)}")

    @precondition(lambda self: self.model.file is not None)
    @rule()
    def delete_transcript(self) -> None:
        self.path.unlink()
        self.model.delete()
        self.partial = None
        note("delete transcript")

    @precondition(lambda self: self.model.file is None)
    @rule()
    def recreate_transcript(self) -> None:
        self.path.touch()
        self.model.recreate()
        note("re-create transcript (empty)")

    # -- monitor -------------------------------------------------------------------------------

    @rule()
    def tick(self) -> None:
        report = self.monitor.tick()
        self.model.tick()
        note(f"tick: {report}")

    @rule(raising=st.booleans())
    def tick_with_provider_error(self, raising: bool) -> None:
        attr = "broken" if raising else "error"
        setattr(self.world.jsonl, attr, True)
        try:
            report = self.monitor.tick()
        finally:
            setattr(self.world.jsonl, attr, False)
        note(f"tick with provider {'raising' if raising else 'error'}: {report}")
        assert report.misses == 0 and report.errors == (1 if self.model.present else 0)

    @rule()
    def continue_session(self) -> None:
        adoption = self.world.adopter().continue_session(ENTRY, self.key)
        self.model.continue_session()
        note(f"continue: generation {adoption.generation}, primed {adoption.primed}")

    @precondition(lambda self: self.model.present)
    @rule()
    def tick_racing_a_continue(self) -> None:
        self.world.jsonl.before = lambda: self.world.adopter().continue_session(ENTRY, self.key)
        report = self.monitor.tick()
        note(f"tick racing a continue: {report}")
        assert report.stale_writes == 1 and report.activities_recorded == 0 and report.missing_emitted == 0
        self.model.continue_session()  # the tick's own write did not land

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def human_activity_is_recorded_exactly_once(self) -> None:
        if not hasattr(self, "world"):
            return
        keys = self.world.dedupe_keys(self.key)
        prefix = activity_key(self.key, "claude-jsonl", HOST, THREAD, "")
        assert len(keys) == len(set(keys))
        assert {k[len(prefix):] for k in keys} == self.model.expected

    @invariant()
    def link_present_iff_the_model_says_so(self) -> None:
        if not hasattr(self, "world"):
            return
        link = self.monitor.links.get(self.key, "main")
        assert (link is not None) == self.model.present
        if link is not None:
            assert link.consecutive_misses == self.model.misses
            assert link.primed == self.model.primed

    @invariant()
    def at_most_one_upstream_missing_per_generation(self) -> None:
        if not hasattr(self, "world"):
            return
        keys = self.world.dedupe_keys(self.key, "upstream_missing")
        assert len(keys) == len(set(keys)) == self.model.missing_emitted
        assert len(self.world.notices()) <= 1
        # R27: the adoption's one announcement; a Continue creates nothing, so announces nothing.
        assert self.world.gw.pending_system_events(MANAGER).count(created_line(self.key, "main", None)) == 1


TestMonitorMachine = MonitorMachine.TestCase


NODE_THREAD = "node-thread-7"
NODE_ENTRY = CatalogEntry("paired-node", NODE_THREAD, "node-a")


class NodeMonitorMachine(RuleBasedStateMachine):
    @initialize(history=st.integers(0, 3), reachable=st.booleans())
    def setup(self, history: int, reachable: bool) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="node-machine-"))
        self.world: World = make_world(self.tmp)
        self.items = 0
        lines = [self._add("human" if n % 2 else "other") for n in range(history)]
        self.world.node.available = reachable
        adoption = self.world.adopter().adopt(NODE_ENTRY, watcher=MANAGER)
        self.world.node.available = True
        self.key = adoption.session_key
        self.monitor: UpstreamMonitor = self.world.monitor()
        self.model = NodeThreadModel()
        self.model.adopt(lines, reachable)
        note(f"adopt a thread of {history} item(s), node {'reachable' if reachable else 'offline'}")

    def teardown(self) -> None:
        if hasattr(self, "world"):
            self.world.gw.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _add(self, kind: str) -> Line:
        self.items += 1
        if kind == "human":
            uid = self.world.node.add_item(NODE_THREAD, role="user", text=f"node human {self.items}")
        elif kind == "tool":
            uid = self.world.node.add_item(NODE_THREAD, role="user", type="tool_result", text="exit 0")
        else:
            uid = self.world.node.add_item(NODE_THREAD, role="assistant", text=f"step {self.items}")
        return Line(uid, "human" if kind == "human" else "other")

    @rule(kind=st.sampled_from(["human", "other", "tool"]))
    def append(self, kind: str) -> None:
        self.model.append(self._add(kind))
        note(f"append {kind}")

    @rule(kinds=st.lists(st.sampled_from(["human", "other"]), min_size=40, max_size=70))
    def burst(self, kinds: list[str]) -> None:
        for kind in kinds:
            self.model.append(self._add(kind))
        note(f"burst of {len(kinds)} items, {kinds.count('human')} human")

    @rule()
    def tick(self) -> None:
        report = self.monitor.tick()
        self.model.tick(node_available=True)
        note(f"tick: {report}")

    @rule()
    def tick_node_offline(self) -> None:
        self.world.node.available = False
        try:
            report = self.monitor.tick()
        finally:
            self.world.node.available = True
        self.model.tick(node_available=False)
        note(f"tick, node offline: {report}")
        assert report.errors == 1 and report.misses == 0

    @invariant()
    def human_activity_is_recorded_exactly_once_with_its_burst_flag(self) -> None:
        if not hasattr(self, "world"):
            return
        keys = self.world.dedupe_keys(self.key)
        assert len(keys) == len(set(keys))
        prefix = activity_key(self.key, "paired-node", NODE_ENTRY.host, NODE_THREAD, "")
        recorded = {k[len(prefix):]: v for k, v in self.world.human_activities(self.key).items()}
        assert recorded == self.model.expected

    @invariant()
    def link_primed_iff_the_model_says_so(self) -> None:
        if not hasattr(self, "world"):
            return
        link = self.monitor.links.get(self.key, "main")
        assert link is not None and link.primed == self.model.primed


TestNodeMonitorMachine = NodeMonitorMachine.TestCase
