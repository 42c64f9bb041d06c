"""Host sampler arithmetic (the live run is in tests/integration/test_producers.py)."""

from __future__ import annotations

import pytest
from perfsift.producers.sampler import counters, rates, scale_multiplexed
from perfsift.producers.synth import TABLE1


def test_multiplexed_counts_are_scaled_to_the_whole_interval() -> None:
    assert scale_multiplexed(1000, enabled=2.0, running=0.5) == 4000  # ran a quarter of the time
    assert scale_multiplexed(1000, enabled=1.0, running=1.0) == 1000
    assert scale_multiplexed(1000, enabled=1.0, running=0.0) is None  # never scheduled: no value


def test_rates_are_differences_per_second_and_never_negative() -> None:
    prev = counters()
    cur = {**prev, "ctx_switches": prev["ctx_switches"] + 500, "pkts_in": prev["pkts_in"] - 10}
    cur["cpu_total"] = prev["cpu_total"] + 4.0
    cur["cpu_busy_user"] = prev["cpu_busy_user"] + 1.0
    cur["cpu_busy_kern"] = prev["cpu_busy_kern"] + 0.5
    cur["cpu_idle_time"] = prev["cpu_idle_time"] + 2.5
    r = rates(prev, cur, seconds=2.0)
    assert r["ctx_switches"] == 250.0
    assert r["pkts_in"] is None  # the counter went backwards (reset): no value, not a negative rate
    assert (r["cpu_user"], r["cpu_kern"], r["cpu_idle"]) == pytest.approx((25.0, 12.5, 62.5))
    assert set(TABLE1) <= set(r)
