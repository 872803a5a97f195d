"""The release's batched wake (``WakeCoalescer.wake_for_notices``) and R23 filing
(``Rewaker.track_all``), issue #35's "wakes off the per-event path": both must leave exactly the
state that asking ``wake`` and ``track`` once per watcher leaves, only cheaper when the window is
open and the wake already owed. Checked against the one-by-one calls (Hypothesis), plus the cases
the short cut exists for, on a coalescer alone with a fake clock (no gateway, no timer thread).
"""

from __future__ import annotations

from hypothesis import given, note, settings
from hypothesis import strategies as st

from sessionstate.services.notice.rewake import Rewaker
from sessionstate.services.notice.wakes import WakeCoalescer
from tests.helpers import Clock

WINDOW = 20.0
WATCHERS = ("agent:a:main", "agent:b:main", "agent:c:main")
TARGETS = (("agent:t:main", "t"), ("agent:u:main", "u"))


class Side:
    """A coalescer whose slot always wins, recording each wake, owed wake and its hooks."""

    def __init__(self, clock: Clock) -> None:
        self.woken: list[tuple[str, str, float]] = []
        self.owed_heard: list[tuple[str, float]] = []
        self.wakes = WakeCoalescer(lambda w, r: self.woken.append((w, r, clock.now)), clock,
                                   lambda watcher, now, window: (True, now), window=WINDOW)
        self.wakes.owed_hooks.append(lambda watcher, due: self.owed_heard.append((watcher, due)))

    def state(self) -> tuple[object, ...]:
        w = self.wakes
        return (self.woken, self.owed_heard, w.owed(), sorted(w._heap), w.sent, w.dropped, dict(w._last))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 3.0, 10.0, 19.0, 20.0, 25.0]),
                          st.dictionaries(st.sampled_from(WATCHERS), st.sampled_from(TARGETS), max_size=3),
                          st.booleans()),
                max_size=12))
def test_the_batched_wake_leaves_what_one_wake_per_watcher_leaves(steps):
    clock = Clock()
    batched, one_by_one = Side(clock), Side(clock)
    for advance, asks, fire in steps:
        clock.now += advance
        note(f"t+{clock.now - 1_700_000_000.0:g}: wake {sorted(asks)}{', then fire_due' if fire else ''}")
        batched.wakes.wake_for_notices(dict(asks))
        for watcher, target in asks.items():
            one_by_one.wakes.wake(watcher, f"session-state: {target[0]}")
        if fire:  # owed wakes fall due and fire the same way on both
            batched.wakes.fire_due()
            one_by_one.wakes.fire_due()
        assert batched.state() == one_by_one.state()


def test_inside_the_window_with_the_wake_owed_only_the_count_moves():
    clock = Clock()
    side = Side(clock)
    start = clock.now
    side.wakes.wake_for_notices({WATCHERS[0]: TARGETS[0]})  # woken at once, its window opens
    clock.now = start + 5
    side.wakes.wake_for_notices({WATCHERS[0]: TARGETS[1]})  # inside: owed, due at the window's end
    before = side.state()
    clock.now = start + 6
    side.wakes.wake_for_notices({WATCHERS[0]: TARGETS[0]})  # owed already, as early
    assert side.woken == [(WATCHERS[0], "session-state: agent:t:main", start)]
    assert side.wakes.owed() == {WATCHERS[0]: start + WINDOW}
    assert side.owed_heard == [(WATCHERS[0], start + WINDOW)]  # told once, not again
    assert side.wakes.dropped == before[5] + 1 == 2
    assert len(side.wakes._heap) == 1  # no second entry for the same window


def test_lines_queued_together_wake_their_watchers_at_one_time():
    ticks = iter(range(1_700_000_000, 1_700_000_100))

    class Ticking(Clock):
        def __call__(self) -> float:
            self.now = float(next(ticks))
            return self.now

    clock = Ticking()
    side = Side(clock)
    side.wakes.wake_for_notices({WATCHERS[0]: TARGETS[0], WATCHERS[1]: TARGETS[1]})
    assert side.wakes.last(WATCHERS[0]) == side.wakes.last(WATCHERS[1]) == 1_700_000_000.0
    assert [reason for _, reason, _ in side.woken] == ["session-state: agent:t:main", "session-state: agent:u:main"]


def test_without_a_wake_hook_nothing_is_asked_not_even_the_clock():
    def clock() -> float:
        raise AssertionError("the clock was read")

    wakes = WakeCoalescer(None, clock, window=WINDOW)
    wakes.wake_for_notices({WATCHERS[0]: TARGETS[0]})
    assert (wakes.sent, wakes.dropped, wakes.owed()) == (0, 0, {})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(WATCHERS), st.sampled_from(TARGETS)), max_size=4), max_size=6),
       st.sets(st.sampled_from(WATCHERS)))
def test_filing_pairs_together_leaves_what_filing_each_leaves(batches, never_woken):
    clock = Clock()
    wakes = WakeCoalescer(lambda w, r: None, clock, window=WINDOW)
    for watcher in WATCHERS:
        if watcher not in never_woken:  # a watcher never woken is not filed (no time to file it at)
            wakes.wake(watcher, "first")
    together, each = Rewaker(wakes, lambda w, t: True), Rewaker(wakes, lambda w, t: True)
    for pairs in batches:
        note(f"file {pairs}")
        together.track_all(pairs)
        for watcher, target in pairs:
            each.track(watcher, target)
        assert together._tracked == each._tracked
        assert {t: sorted(h) for t, h in together._heaps.items()} == {t: sorted(h) for t, h in each._heaps.items()}


# -- the short cuts themselves: what they exist to skip ---------------------------------------------


def test_a_wake_owed_as_early_inside_the_window_takes_no_further_step():
    clock = Clock()
    side = Side(clock)
    side.wakes.wake_for_notices({WATCHERS[0]: TARGETS[0]})  # woken
    clock.now += 5
    side.wakes.wake_for_notices({WATCHERS[0]: TARGETS[0]})  # owed
    attempts: list[str] = []
    attempt = side.wakes._attempt
    side.wakes._attempt = lambda watcher, *a, **k: (attempts.append(watcher), attempt(watcher, *a, **k))[1]  # type: ignore[method-assign]
    clock.now += 1
    side.wakes.wake_for_notices({WATCHERS[0]: TARGETS[0], WATCHERS[1]: TARGETS[0]})
    assert attempts == [WATCHERS[1]]  # only the watcher not yet woken goes the long way


def test_a_pair_filed_already_is_not_filed_again():
    clock = Clock()
    wakes = WakeCoalescer(lambda w, r: None, clock, window=WINDOW)
    wakes.wake(WATCHERS[0], "first")
    wakes.wake(WATCHERS[1], "first")
    rewaker = Rewaker(wakes, lambda w, t: True)
    rewaker.track_all([(WATCHERS[0], TARGETS[0])])
    filed: list[tuple[str, tuple[str, str]]] = []
    track = rewaker.track
    rewaker.track = lambda watcher, target: (filed.append((watcher, target)), track(watcher, target))[1]  # type: ignore[method-assign]
    rewaker.track_all([(WATCHERS[0], TARGETS[0]), (WATCHERS[1], TARGETS[0]), (WATCHERS[0], TARGETS[1])])
    assert filed == [(WATCHERS[1], TARGETS[0]), (WATCHERS[0], TARGETS[1])]
