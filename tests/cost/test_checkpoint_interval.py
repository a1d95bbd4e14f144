"""Young and Daly checkpoint intervals against the worked values in docs/sources.md#checkpoint-interval and the
formulas' limits."""

import math

import pytest

from paddlefit.cost.checkpoint_interval import daly_interval_s, young_interval_s


def test_worked_example_5_min_write_6_h_mtbi():
    assert young_interval_s(300, 6 * 3600) == pytest.approx(3600.0, rel=1e-12)  # sqrt(2*300*21600) exactly
    # Daly: 3600 * (1 + sqrt(300/43200)/3 + (300/43200)/9) - 300
    assert daly_interval_s(300, 6 * 3600) == pytest.approx(3600 * (1 + (1 / 12) / 3 + (1 / 144) / 9) - 300)
    assert round(daly_interval_s(300, 6 * 3600) / 60) == 57


def test_limits_and_ordering():
    assert daly_interval_s(3 * 3600, 3600) == 3600  # delta >= 2M: checkpoint every M
    for delta, m in [(10, 3600), (60, 86400), (300, 7200)]:
        assert daly_interval_s(delta, m) < young_interval_s(delta, m)  # Daly subtracts the write time
    assert daly_interval_s(1, 1e6) / young_interval_s(1, 1e6) == pytest.approx(1, abs=1e-3)  # agree as delta/M -> 0
    with pytest.raises(ValueError):
        young_interval_s(0, 3600)
    with pytest.raises(ValueError):
        daly_interval_s(60, math.inf)
