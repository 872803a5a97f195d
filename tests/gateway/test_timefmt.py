from datetime import datetime, timezone

from hypothesis import example, given, strategies as st

from sessionstate.services.notice.reconcile import events_json
from sessionstate.shared.timefmt import iso_micros, iso_millis


def reference(epoch: float) -> str:
    moment = datetime.fromtimestamp(epoch, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@given(st.floats(min_value=-62_135_596_800, max_value=253_402_300_799, allow_nan=False))
@example(1_700_000_000.9999996)
@example(1_700_000_000.0004995)
@example(1_700_000_000.9995)
@example(0.0)
@example(-0.0004995)
@example(-1_700_000_000.9995)
@example(1_800_000_000.0078125)  # an exact half-microsecond tie: half-even keeps 7812 µs
def test_iso_millis_is_byte_identical_to_datetime(epoch):
    assert iso_millis(epoch) == reference(epoch)


_EPOCHS = st.floats(min_value=-62_135_596_800, max_value=253_402_300_799, allow_nan=False)


@given(st.lists(st.tuples(_EPOCHS, st.integers(1, 3)), max_size=30))
def test_a_page_writes_each_event_s_instant_as_iso_millis_whether_or_not_it_repeats_the_last(runs):
    # events_json writes a run of one instant once (a batch's events share one), and rounds
    # each new instant inline: every event's text is still iso_millis of its own instant.
    epochs = [epoch for epoch, repeats in runs for _ in range(repeats)]
    rows = [(i, "goal_changed", "agent", e, "s", None, None, None) for i, e in enumerate(epochs)]
    assert [event["occurredAt"] for event in events_json(rows)] == [iso_millis(e) for e in epochs]
    micros = [round(e * 1e6) for e in epochs]  # a backend that rounded in SQL sends whole microseconds
    rows = [(i, "goal_changed", "agent", m, "s", None, None, None) for i, m in enumerate(micros)]
    assert [event["occurredAt"] for event in events_json(rows)] == [iso_micros(m) for m in micros]
