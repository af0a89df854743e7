"""The peer-exchange schedule: a thin node asks often, a well-connected one seldom."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sync.membership import PX_JITTER, px_delay
from sync.membership.px_schedule import THIN_SHARE

spreads = st.floats(min_value=PX_JITTER[0], max_value=PX_JITTER[1])


@given(connected=st.integers(0, 1_000), low=st.integers(1, 1_000),
       interval=st.floats(0.1, 86_400.0), spread=spreads)
def test_below_the_low_watermark_the_interval_shrinks(connected: int, low: int,
                                                      interval: float, spread: float) -> None:
    delay = px_delay(connected, low, interval, spread)
    if connected < low:
        assert delay == pytest.approx(interval * THIN_SHARE * spread)
        assert delay <= interval * THIN_SHARE * PX_JITTER[1]
    else:
        assert delay == pytest.approx(interval * spread)
        assert delay >= interval * PX_JITTER[0]


def test_the_defaults_ask_every_five_seconds_while_thin() -> None:
    assert px_delay(1, 8, 30.0, 1.0) == pytest.approx(5.0)
    assert px_delay(8, 8, 30.0, 1.0) == pytest.approx(30.0)


def test_a_spread_outside_the_jitter_is_refused() -> None:
    with pytest.raises(ValueError):
        px_delay(1, 8, 30.0, 2.0)
