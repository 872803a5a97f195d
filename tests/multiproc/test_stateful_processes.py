"""The stateful test with three gateways on one database (each backend) against the one
reference model.

Every rule of ``GatewayVersusModel`` runs in the process the last ``switch`` picked; after each
step every process sweeps (what its pump does on the commit). A process restarts alone or is
killed (it leaves its server row and claims behind until another finds its lease run out),
and ``attach`` moves a watcher to a process (the last attach wins). The queue invariants hold in
every process for the watchers it serves; a process that does not serve a watcher holds no
notice for it (INV11). Wakes are per process (each owes its own, R23), so they are held to
WAKE1 (no two wakes of a watcher within a window, in all processes together) and LIV1 (every
process holding a line that entered after its own last wake of a main-style watcher owes it a
wake, due within the window) rather than to the one model's list.
"""

from __future__ import annotations

from hypothesis import note, strategies as st
from hypothesis.stateful import invariant, precondition, rule

from sessionstate import Gateway
from tests.backends import stateful_test_cases
from tests.gateway.test_stateful import MAX_ROWS, GatewayVersusModel
from sessionstate.verify.refmodel import agent_of

PROCESSES = (0, 1, 2)


class GatewaysVersusModel(GatewayVersusModel):
    def __init__(self) -> None:
        self.gws: dict[int, Gateway] = {}
        self.current = 0
        super().__init__()
        for index in PROCESSES[1:]:
            self.gws[index] = self._open()

    @property  # type: ignore[override]
    def gw(self) -> Gateway:
        return self.gws[self.current]

    @gw.setter
    def gw(self, value: Gateway) -> None:
        self.gws[self.current] = value

    def _open(self) -> Gateway:
        # A server without the pump thread (sweeps run by hand). It learns the claims before
        # it serves anything, as Gateway.open(pump=True) does: its startup sweep runs after the
        # registration, so it never queues or wakes for a watcher another server holds.
        if not hasattr(self, "wake_times"):
            self.wake_times: list[tuple[str, float]] = []
        gw = Gateway.open(
            self.url,
            clock=lambda: self.model.now,
            on_wake=lambda w, r: self.wake_times.append((w, self.model.now)),
            max_rows=MAX_ROWS,
            auto_prune=False,  # the machine prunes as a rule (R30's schedule: test_auto_prune.py)
            serve=[],
            record_created=self.record_created,
            notify_on_create=False,  # as the one-process machine: the model has no announcement line
        )
        with gw.locked():
            gw.cluster.register()
            gw.cluster.serve(["*"])
        gw.ops.startup_sweep()
        return gw

    def teardown(self) -> None:
        for index in PROCESSES:
            self.current = index
            if index in self.gws:
                self.gws[index].close()
        self.current = 0
        self.gws[0] = self._open()  # the parent's teardown closes self.gw and removes the files
        super().teardown()

    def _sweep_all(self) -> None:
        for gw in self.gws.values():
            gw.cluster.sweep()

    def _fire_due_wakes(self) -> None:
        for gw in self.gws.values():  # each process's timer
            gw.ops.fire_due_wakes()
        self.model.fire_due_wakes()

    def _all_pending(self) -> set[tuple[str, str]]:
        return {
            (w, text)
            for gw in self.gws.values()
            for w in self.model.sessions
            for text in gw.pending_system_events(w)
        }

    def _step(self, action, *, quiet: bool = False) -> None:
        super()._step(lambda: (action(), self._sweep_all()), quiet=quiet)

    # -- rules of several processes ---------------------------------------------------------

    @rule(index=st.sampled_from(PROCESSES))
    def switch(self, index: int) -> None:
        note(f"switch to process {index}")
        self.current = index

    @precondition(lambda self: any(agent_of(k) for k in self.model.sessions))
    @rule(data=st.data(), index=st.sampled_from(PROCESSES))
    def attach(self, data, index: int) -> None:
        watcher = data.draw(st.sampled_from(sorted(k for k in self.model.sessions if agent_of(k))))
        note(f"attach {watcher} to process {index}")
        gw = self.gws[index]
        was_served = gw.cluster.serves(watcher)
        self._step(lambda: gw.cluster.attach(watcher))
        if not was_served:
            self.model.requeue(watcher)
        assert gw.cluster.serves(watcher)
        assert not any(other.cluster.serves(watcher) for i, other in self.gws.items() if i != index)

    @rule(index=st.sampled_from(PROCESSES))
    def restart(self, index: int) -> None:  # type: ignore[override]
        note(f"restart process {index}")
        self._replace(index, lambda gw: gw.close())

    @rule(index=st.sampled_from(PROCESSES))
    def crash(self, index: int) -> None:
        """The process dies without closing: its server row and claims stay until another
        process finds its heartbeat older than the lease (R20) and releases them."""
        note(f"kill process {index}; its lease runs out")
        dead = self.gws[index]
        dead_id = dead.ops.diagnostics().server_id

        def kill(gw: Gateway) -> None:
            gw.close(unregister=False)  # its threads die with it; its server row and claims stay

        def take_over() -> None:
            survivor = self.gws[(index + 1) % len(PROCESSES)]
            with survivor.locked():
                with survivor.store.transaction():
                    assert survivor.store.serving.heartbeat(dead_id, 0.0)  # its heartbeat aged
                survivor.cluster.heartbeat()
                assert dead_id not in survivor.store.serving.all_claims().values()

        self._replace(index, kill, after=take_over)

    def _replace(self, index: int, stop, after=lambda: None) -> None:
        before = {i: {w for w in self.model.sessions if gw.cluster.serves(w)} for i, gw in self.gws.items() if i != index}
        stop(self.gws[index])
        self.gws[index] = self._open()
        after()
        self._sweep_all()
        woken = {w for w in self.model.sessions if self.gws[index].cluster.serves(w)}
        for i, served in before.items():
            woken |= {w for w in self.model.sessions if self.gws[i].cluster.serves(w)} - served
        self.model.restart(woken)
        self.pending_texts.clear()
        self.opened_by_last_step = set()
        self.last_step_quiet = False

    @rule()
    def prune(self) -> None:  # type: ignore[override]
        super().prune()
        self._sweep_all()

    # -- invariants over every process --------------------------------------------------------

    @invariant()
    def inv2_one_notice_per_pair(self) -> None:  # type: ignore[override]
        for gw in self.gws.values():
            for watcher in self.model.sessions:
                targets = [t.target for t in gw.ops.queued_events(watcher) if t.target is not None]
                assert len(targets) == len(set(targets)), targets

    @invariant()
    def inv3_byte_stable_notice(self) -> None:  # type: ignore[override]
        for gw in self.gws.values():
            for watcher in self.model.sessions:
                for entry in gw.ops.queued_events(watcher):
                    if entry.target is not None:
                        pair = (watcher, entry.target[0])
                        assert self.pending_texts.setdefault(pair, entry.text) == entry.text, pair

    @invariant()
    def inv4_queue_matches_cursors(self) -> None:  # type: ignore[override]
        for index, gw in self.gws.items():
            for watcher in self.model.sessions:
                want = sorted(self.model.pending(watcher)) if gw.cluster.serves(watcher) else []
                assert sorted(gw.pending_system_events(watcher)) == want, (index, watcher)

    @invariant()
    def wake1_one_wake_per_window(self) -> None:
        last: dict[str, float] = {}
        for watcher, at in self.wake_times:
            assert ":subagent:" not in watcher, watcher
            assert watcher not in last or at - last[watcher] >= 20.0, (watcher, last.get(watcher), at)
            last[watcher] = at

    @invariant()
    def liv1_no_stranded_notice(self) -> None:  # type: ignore[override]
        for index, gw in self.gws.items():
            owed = gw.ops.diagnostics().owed_wakes
            for watcher in self.model.sessions:
                if agent_of(watcher) and ":subagent:" not in watcher and watcher in gw.ops.diagnostics().unwoken:
                    assert gw.cluster.serves(watcher), (index, watcher)
                    assert watcher in owed, (index, watcher)
                    assert self.model.now < owed[watcher] <= self.model.now + 20.0, (index, watcher, owed)

    @invariant()
    def inv6_nothing_uncovered(self) -> None:  # type: ignore[override]
        assert self.model.uncovered() == []
        for (watcher, target), cursor in self.model.cursors.items():
            positions = self.gw.ops.cursor_positions(watcher, target)
            owed = positions is not None and positions.material > positions.last_seen
            for gw in self.gws.values():
                if gw.cluster.serves(watcher):
                    queued = any(e.target and e.target[0] == target for e in gw.ops.queued_events(watcher))
                    assert owed == queued, (watcher, target, positions)

    @invariant()
    def inv11_served_queues(self) -> None:
        for watcher in self.model.sessions:
            servers = [i for i, gw in self.gws.items() if gw.cluster.serves(watcher)]
            assert servers, watcher  # every process serves "*" unless another holds the claim
            for gw in self.gws.values():
                if not gw.cluster.serves(watcher):
                    assert not any(e.target for e in gw.ops.queued_events(watcher)), watcher


globals().update(stateful_test_cases(GatewaysVersusModel, "GatewaysVersusModel"))
