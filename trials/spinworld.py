"""SPIN's world held to the real gateway: random simulation runs of the generated model replayed.

``simulate`` runs one random simulation of a Promela model (``spin -u N -n SEED``, the LTL
claims left out: a simulation follows the world, not a property) and returns the lines the
model prints: ``@ACT`` per action, ``@POS`` per step (the durable positions), ``@WAKE`` per
wake, and ``@Q`` (added here by ``with_queue_prints``) per process queue slot after each step.
``replay_simulation`` runs such a run on real gateways (one SQLite file, one gateway per model
process, ``spin.replay_trail``'s set-up) and compares after every step:

- the positions ``(L, N, M)`` of every pair (or that the pair has no cursor);
- every process's queue: per watcher, the notice lines ``pending_system_events`` would hand it,
  against the model's ``qtext`` (``changesSince + 1`` per pair and process, 0 for none);
- every wake, per watcher and step: which processes woke the main-style A, and that nothing
  wakes B, a sub-agent in the model (R12) and here (``SIM_KEYS``: ``agent:b:subagent:b``).

A change to the world's heal (R23's re-wake), its self-suppression or its claims that the
gateway does not share shows up as a difference in some seed's run; the tests seed such
changes into the generated text (``tests/trials/test_spin_world.py``).

Nothing here depends on line numbers of the generated model: the queue prints are inserted
after the ``@POS`` printf of the ``after`` inline, found by its text.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from sessionstate.shared.formats import notice_text
from sessionstate.verify.spin import defines, trail_actions, work_directory
from sessionstate.verify.world import PAIRS, Action, provenance_of

# The sessions' keys on the real gateways: the trail replay's, but B a sub-agent as in the
# model (MAIN_STYLE in promela.py), so its wakes are compared too: none, for real and there.
SIM_KEYS = {"A": "agent:a:main", "B": "agent:b:subagent:b", "C": "agent:c:main"}

# The bounds of a simulation: longer than the exhaustive search's (a run is one path).
SIM_BOUNDS = {1: {"MAXSEQ": 3, "STEPS": 10}, 2: {"MAXSEQ": 3, "STEPS": 10}}
_AFTER_POS = re.compile(r'(inline after\(q\) \{.*?printf\("@POS[^;]*;\n)', re.S)
_LTL = re.compile(r"^ltl .*$", re.M)
# The environment's options that end a pair (a delete, a reset, an unwatch) and a re-watch: a uniform random
# choice picks them so often that most runs lose every pair in a few steps. ``SIM_ENDINGS``
# (a define, 1 in every fourth seed) keeps them; otherwise the run is one of the world's runs
# without them (a sub-world: every step it takes is a step of the full model).
_ENDING = re.compile(r"^(\s*:: )(.*-> (?:delete|reset|unwatch|watch)\()", re.M)
QUEUE_PRINT = (
    "  for (rq_ : 0 .. NQ - 1) { printf(\"@Q %d %d\\n\", rq_, qtext[rq_]) };\n"
    "  rq_ = 0;\n"
    "  printf(\"@C %d %d\\n\", claim[0], claim[1]);\n"
    "  for (rq_ : 0 .. PROCS - 1) { printf(\"@D %d %d\\n\", rq_, dirty[rq_]) };\n"
    "  rq_ = 0;\n"
)


class ModelShapeChanged(RuntimeError):
    """The generated model no longer has the text the queue prints are anchored to."""


def with_queue_prints(model: str) -> str:
    """``model`` printing every process's queue after each step (and without its LTL claims)."""
    found = _AFTER_POS.search(model)
    if found is None:
        raise ModelShapeChanged("no `inline after(q)` with a @POS printf in the generated model")
    model = model[: found.end()] + QUEUE_PRINT + model[found.end():]
    model = model.replace("inline after(q) {", "hidden byte rq_;\ninline after(q) {", 1)
    model = _ENDING.sub(lambda m: f"{m.group(1)}SIM_ENDINGS && {m.group(2)}", model)
    return "#ifndef SIM_ENDINGS\n#define SIM_ENDINGS 1\n#endif\n" + _LTL.sub("", model)


def simulate(model: str, processes: int, seed: int, bounds: dict[str, int] | None = None,
             workdir: Path | None = None, max_steps: int = 200_000) -> list[str]:
    """The ``@`` lines of one random simulation run of ``model`` with ``seed``."""
    workdir = work_directory(workdir, "sessionstate-spinsim-")
    bounds = dict(bounds or SIM_BOUNDS[processes])
    path = workdir / "sim.pml"
    path.write_text(with_queue_prints(model))
    endings = f"-DSIM_ENDINGS={int(seed % 4 == 0)}"
    done = subprocess.run(["spin", *defines(processes, bounds), endings, f"-u{max_steps}", f"-n{seed}", path.name],
                          cwd=workdir, capture_output=True, text=True, timeout=300)
    if done.returncode != 0 and "assertion violated" not in done.stdout:
        raise RuntimeError(f"spin simulation (seed {seed}) failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("@")]
    if "assertion violated" in done.stdout:  # the model's own check failed: replay up to there
        lines.append("@VIOLATION")
    return lines


@dataclass
class SimStep:
    """One model step: the action (``None``: a window passes), the positions, the queue slots
    (``qtext`` by index ``q * NPAIRS + pair``) and the wakes ``(watcher, process)``."""

    action: Action | None
    word: str
    positions: tuple | None = None
    queues: dict[int, int] = field(default_factory=dict)
    wakes: list[tuple[int, int]] = field(default_factory=list)
    claims: tuple[int, int] = (0, 0)
    dirty: dict[int, int] = field(default_factory=dict)


def parse_run(lines: list[str], processes: int) -> list[SimStep]:
    out: list[SimStep] = []
    wakes: list[tuple[int, int]] = []
    for line in lines:
        word, *args = line.split()
        if word == "@WAKE":
            wakes.append((int(args[0]), int(args[1])))
        elif word == "@ACT":
            out.append(SimStep(trail_actions([line], processes)[0][0], args[0], wakes=wakes))
            wakes = []
        elif word == "@POS" and out:
            pos = []
            for part in args:
                watched, l_, n_, m_ = (int(x) for x in part.split(","))
                pos.append((l_, n_, m_) if watched else None)
            out[-1].positions = tuple(pos)
        elif word == "@C" and out:
            out[-1].claims = (int(args[0]), int(args[1]))
        elif word == "@D" and out:
            out[-1].dirty[int(args[0])] = int(args[1])
        elif word == "@Q" and out:
            out[-1].queues[int(args[0])] = int(args[1])
    return out


@dataclass
class SimReplay:
    seed: int
    steps: int
    differences: list[str]
    model_wakes: int = 0  # A's wakes in the run
    queued_lines: int = 0  # notice lines the model held, summed over the steps
    words: list[str] = field(default_factory=list)
    b_real_wakes: int = 0  # B's wakes for real, over the run (each one also a difference: R12)
    reattached: int = 0  # claims re-taken after a restart (see replay_simulation)


def replay_simulation(steps: list[SimStep], processes: int, directory: Path, seed: int = 0) -> SimReplay:
    """Run the model's steps on real gateways; every difference in positions, queues or A's
    wakes, step by step."""
    from sessionstate.facade.gateway import Gateway
    from sessionstate.verify import replay

    directory.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{directory / 'world.db'}"
    now = [replay.NOW]
    sent: list[int] = []
    b_sent: list[int] = []

    def opened(server: bool, process: int = 0) -> Gateway:
        def on_wake(watcher: str, reason: str) -> None:
            if watcher == SIM_KEYS["A"]:
                sent.append(process)
            elif watcher == SIM_KEYS["B"]:
                b_sent.append(process)

        gw = Gateway.open(url, clock=lambda: now[0], on_wake=on_wake, record_created=False,
                          notify_on_create=False, auto_prune=False)  # the model prunes as an action
        if server:
            gw.cluster.register()
        return gw

    first = opened(False)
    for key in SIM_KEYS.values():
        first.create_session(key)
    for watcher, target in PAIRS:
        first.watch(SIM_KEYS[watcher], SIM_KEYS[target], ambient=provenance_of((watcher, target)) == "ambient")
    if processes == 1:
        gws = [first]
    else:
        first.close()
        gws = [opened(True, 0), opened(True, 1)]
        for watcher in ("A", "B"):
            gws[0].cluster.attach(SIM_KEYS[watcher])
        gws[1].cluster.sweep()
    wakes = replay.ReplayWakes()
    result = SimReplay(seed, 0, [])
    try:
        for index, step in enumerate(steps):
            sent.clear()
            b_sent_before = len(b_sent)
            action = step.action
            label = f"seed {seed} step {index + 1} ({action or 'the window passes'})"
            if action is None:
                now[0] += replay.STEP_SECONDS
                for gw in gws:
                    gw.ops.fire_due_wakes()
            elif action[0] == "restart":
                process = action[1] if processes == 2 else 0
                gws[process].close()
                gws[process] = opened(processes == 2, process)
                if processes == 2:
                    # The model's claims outlive a restart (claim[] is durable and names the
                    # process, not the server instance); the real reopened gateway is a new
                    # server whose predecessor's claims are stale, so the other process would
                    # serve by pattern (R19). Found by this replay (docs/verification.md): the
                    # replay re-attaches the model's claimant, as the model assumes.
                    for w_index, watcher in enumerate(("A", "B")):
                        if step.claims[w_index] == process and gws[process].ops.session_exists(SIM_KEYS[watcher]):
                            gws[process].cluster.attach(SIM_KEYS[watcher])
                            result.reattached += 1
            elif processes == 1:
                gws[0] = replay.apply_real(gws[0], url, action, wakes, SIM_KEYS)
            else:
                replay.apply_real_process(gws, url, action, wakes, SIM_KEYS)
            result.steps += 1
            result.words.append(step.word)
            want = sorted(q for w, q in step.wakes if w == 0)
            result.model_wakes += len(want)
            if sorted(sent) != want:
                result.differences.append(f"{label}: A woken by processes {sorted(sent)} for real, {want} in the model")
            b_step = sorted(b_sent[b_sent_before:])
            b_want = sorted(q for w, q in step.wakes if w == 1)  # the model asserts none (R12)
            if b_step != b_want:
                result.differences.append(f"{label}: B woken by processes {b_step} for real, {b_want} in the model")
            result.differences += _state_differences(gws, step, label, processes)
            result.queued_lines += sum(1 for v in step.queues.values() if v)
    finally:
        for gw in gws:
            gw.close()
    result.b_real_wakes = len(b_sent)
    return result


def _state_differences(gws: list, step: SimStep, label: str, processes: int) -> list[str]:
    from sessionstate.verify import replay

    out: list[str] = []
    gw0 = gws[0]
    live = {name: gw0.ops.session_exists(key) for name, key in SIM_KEYS.items()}
    if step.positions is not None:
        for pair_index, (watcher, target) in enumerate(PAIRS):
            if not (live[watcher] and live[target]):
                if step.positions[pair_index] is not None:
                    out.append(f"{label}: pair {watcher}{target} has no session for real, {step.positions[pair_index]}"
                               " in the model")
                continue
            real = gw0.ops.cursor_positions(SIM_KEYS[watcher], SIM_KEYS[target])
            real_t = tuple(real) if real else None
            if real_t != step.positions[pair_index]:
                out.append(f"{label}: pair {watcher}{target} real {real_t} != model {step.positions[pair_index]}")
    if not step.queues:
        return out
    npairs = len(PAIRS)
    for process in range(processes):
        for w_index, watcher in enumerate(("A", "B")):
            if processes == 2 and step.claims[w_index] != process and step.dirty.get(process):
                # A process that does not serve the watcher and lags the other's commits (R22)
                # may still queue for it by the claim it last read; its sweep drops the line.
                # The model's INV11 holds only once the process swept: so is this comparison.
                continue
            want = sorted(notice_text(SIM_KEYS[t], step.queues.get(process * npairs + p, 0) - 1)
                          for p, (w, t) in enumerate(PAIRS) if w == watcher and step.queues.get(process * npairs + p, 0))
            got = sorted(gws[process].pending_system_events(SIM_KEYS[watcher])) if live[watcher] else []
            if got != want:
                out.append(f"{label}: process {process} queues {got} for {watcher} for real, {want} in the model")
    return out


def run_seed(model: str, processes: int, seed: int, directory: Path,
             bounds: dict[str, int] | None = None) -> SimReplay:
    """Simulate ``model`` with ``seed`` and replay the run on real gateways."""
    lines = simulate(model, processes, seed, bounds, workdir=directory / "spin")
    result = replay_simulation(parse_run(lines, processes), processes, directory / "real", seed)
    if lines and lines[-1] == "@VIOLATION":
        result.differences.append(f"seed {seed}: the model's own assertion failed after step {result.steps}")
    return result
