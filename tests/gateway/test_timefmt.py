from datetime import datetime, timezone

from hypothesis import example, given, strategies as st

from sessionstate.shared.timefmt import iso_millis


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
