"""The plan's row arithmetic (paddlefit.plan.rows) on literal rows: the largest batch that fits, the CPU step from the
probe's line and the recommendation. Pure arithmetic, no Paddle; expected values computed by hand."""

from __future__ import annotations

import math

import pytest

from paddlefit.plan.request import Target
from paddlefit.plan.rows import cpu_step_s, max_batch, recommend
from paddlefit.units import GIB


def test_max_batch_is_the_floor_over_the_tightest_phase() -> None:
    assert max_batch([(100.0, 10.0)], 1000.0) == 90  # (1000 - 100) / 10
    assert max_batch([(100.0, 10.0), (300.0, 5.0)], 1000.0) == 90  # min(90, 140)
    assert max_batch([(100.0, 0.0), (200.0, 30.0)], 1000.0) == 26  # 800 / 30 = 26.7, floored
    assert max_batch([(0.0, 250.0)], 1000.0) == 4  # exactly at the limit still fits


def test_max_batch_without_growth_or_room() -> None:
    assert max_batch([(100.0, 0.0)], 1000.0) is None  # nothing grows with the batch: no largest batch
    assert max_batch([], 1000.0) is None
    assert max_batch([(1200.0, 1.0)], 1000.0) == 0  # the fixed part alone is over the limit
    assert max_batch([(100.0, 10.0), (1001.0, 0.0)], 1000.0) == 0


def test_cpu_step_from_the_probe_line() -> None:
    assert cpu_step_s((0.010, 0.002), 32) == pytest.approx(0.074)  # 10 ms + 32 x 2 ms
    assert math.isnan(cpu_step_s(None, 32))  # no probe
    assert math.isnan(cpu_step_s((0.0, 1e-8), 10))  # 1e-7 s: under MIN_CPU_STEP_S (1e-6 s), no measurement
    assert math.isnan(cpu_step_s((0.9, -0.2), 64))  # a line that fell below zero


def _row(
    name: str,
    cap_gib: float,
    sps: float,
    *,
    kind: str = "gpu",
    fits: bool = True,
    peak_gib: float = 10.0,
    max_batch_size: int | None = 64,
    calibration: str = "published-fit",
    lower: bool = False,
) -> Target:
    return Target(
        name=name,
        kind=kind,
        fits=fits,
        peak_bytes=int(peak_gib * GIB),
        capacity_bytes=int(cap_gib * GIB),
        max_batch_size=max_batch_size,
        step_time_s=64 / sps,
        samples_per_s=sps,
        calibrated=False,
        notes=[],
        calibration=calibration,
        speed_lower_bound=lower,
    )


CPU = _row("cpu", 31.2, 40.0, kind="cpu")


def test_the_fastest_gpu_that_fits_and_the_smallest() -> None:
    a100, t4 = _row("A100", 80, 2000.0), _row("T4", 16, 1000.0)  # 1000 x 1.01 < 2000: no tie
    slow = _row("V100", 32, 3000.0, fits=False)  # faster but does not fit
    assert recommend([CPU, slow, t4, a100], 64).to_dict() == {
        "target": "A100",
        "reason": "fastest GPU that fits: 2,000 samples/s predicted, peak 10.0 of 80 GiB; smallest card that fits: "
        "T4 (1,000 samples/s, peak 10.0 of 16 GiB)",
        "smallest_fit": "T4",
        "tie_break": "",
    }


def test_a_tie_the_smallest_card_also_wins() -> None:
    small, big = _row("L4", 24, 1000.0, peak_gib=2.5), _row("A100", 80, 999.0)  # 999 x 1.01 >= 1000
    rec = recommend([big, small], 64)
    assert rec["target"] == "L4" and rec["smallest_fit"] == "L4"
    assert (
        rec["reason"] == "fastest GPU that fits, within 1% (tie-break below): 1,000 samples/s predicted, peak 2.5 "
        "of 24 GiB"
    )
    assert rec["tie_break"] == (
        "2 GPUs within 1% of the fastest samples/s tie (below the model's resolution); the "
        "tie goes to the smallest card that fits (the least memory), then the faster: L4 "
        "(24 GiB) is also the fastest"
    )


def test_rows_no_measurement_grounds_are_ranked_only_alone() -> None:
    t4, xpu = _row("T4", 16, 1000.0), _row("K200", 32, 5000.0, calibration="uncalibrated")
    assert recommend([xpu, t4], 64)["target"] == "T4"
    assert recommend([xpu], 64)["target"] == "K200"
    l20 = _row("L20", 48, 9000.0, lower=True)
    rec = recommend([l20, t4], 64)
    assert rec["target"] == "T4" and rec["reason"].endswith(
        "; not ranked: L20 (the catalog lacks the peak of the precision's unit: the speed shown is a lower bound)"
    )
    assert recommend([l20], 64)["target"] == "L20"


def test_no_gpu_fits() -> None:
    rows = [
        CPU,
        _row("T4", 16, 100.0, fits=False, max_batch_size=5),
        _row("A100", 80, 900.0, fits=False, max_batch_size=12),
    ]
    assert recommend(rows, 64).to_dict() == {
        "target": None,
        "reason": "batch 64 fits no GPU; largest that fits is 12 on A100: lower --batch-size with gradient "
        "accumulation, use AMP (--precision bf16-o1/fp16-o1), or shard across devices",
        "smallest_fit": None,
        "tie_break": "",
    }
    states = [
        CPU,
        _row("T4", 16, 100.0, fits=False, max_batch_size=0),
        _row("L4", 24, 1.0, fits=False, max_batch_size=None),
    ]
    assert recommend(states, 64)["reason"] == (
        "model states alone exceed every GPU: use AMP O2, sharding or tensor/pipeline parallel"
    )


def test_cpu_only() -> None:
    assert recommend([CPU], 8).to_dict() == {
        "target": "cpu",
        "reason": "no GPU targets selected",
        "smallest_fit": None,
        "tie_break": "",
    }
    assert recommend([_row("cpu", 1, 1.0, kind="cpu", fits=False)], 8)["target"] is None


def test_time_to_train_is_set_on_new_rows() -> None:
    from types import SimpleNamespace

    from paddlefit.plan.rows import set_time_to_train

    req = SimpleNamespace(dataset_size=1000, epochs=3, batch_size=32, devices=4)
    gpu, cpu, nan = _row("T4", 16, 640.0), CPU, _row("L4", 24, float("nan"))  # steps 0.1 s, 1.6 s, NaN
    out = set_time_to_train([gpu, cpu, nan], req)
    # GPU: ceil(1000 / (32 x 4)) = 8 steps x 3 epochs x 0.1 s; CPU (one device): ceil(1000 / 32) = 32 x 3 x 1.6 s
    assert out[0].time_to_train_s == pytest.approx(2.4) and out[1].time_to_train_s == pytest.approx(153.6)
    assert out[2].time_to_train_s is None and gpu.time_to_train_s is None  # no step time; the input row unchanged
    assert set_time_to_train([gpu], SimpleNamespace(dataset_size=None, epochs=3)) == [gpu]


def test_the_cpu_peak_minus_states_and_activations_is_the_fixed_rest() -> None:
    from types import SimpleNamespace

    from paddlefit.plan.rows import cpu_fixed_bytes

    m = SimpleNamespace(
        phase_lines_bytes=(("forward", (100.0, 10.0)), ("backward", (300.0, 5.0))),
        states32=SimpleNamespace(total_bytes=50),
        act_bytes_per_sample=4.0,
    )
    assert cpu_fixed_bytes(m, 10) == pytest.approx(260.0)  # max(200, 350) - 50 - 4 x 10
    assert cpu_fixed_bytes(m, 100) == pytest.approx(1100 - 50 - 400)  # max(1100, 800)
