"""paddlefit cost: the spot model against a simulation, the per-instance arithmetic, SkyPilot's cache, the CLI."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from paddlefit.catalog.gpus import get_gpu, load_gpus
from paddlefit.catalog.price_csv import parse_price_csv
from paddlefit.catalog.prices import gpu_for_instance, load_prices, select_prices
from paddlefit.catalog.skypilot import load_skypilot_cache, parse_skypilot_vms
from paddlefit.cost.checkpoint_interval import daly_interval_s, young_interval_s
from paddlefit.cost.instances import (
    HOURS_PER_MONTH,
    InterruptionRate,
    build_cost,
    expected_spot_wall_s,
    rate_from_bucket,
)
from paddlefit.errors import CatalogError, PaddlefitError
from paddlefit.estimate.collectives import CALL_OVERHEAD_S, RING_EFFICIENCY, train_gradient_allreduce
from paddlefit.plan.request import Plan, Target
from paddlefit.units import GIB, MIB

HEADER = (
    "cloud,instance_type,accelerator,accelerator_count,vcpus,memory_gib,price_usd_per_hour,spot_usd_per_hour,region"
)


def _simulate(work, tau, delta, m, restart, runs, rng):
    """Wall time of `work` s of training in segments of tau (+ delta to checkpoint) under Exp(m) interruptions;
    an interruption loses the segment and costs `restart` s (itself interruptible)."""
    totals = np.empty(runs)
    segs = math.ceil(work / tau)
    for i in range(runs):
        t = 0.0
        for k in range(segs):
            need = min(tau, work - k * tau) + delta
            first = True
            while True:
                length = need if first else restart + need
                x = rng.exponential(m)
                if x >= length:
                    t += length
                    break
                t += x
                first = False
        totals[i] = t
    return totals.mean()


def test_spot_wall_time_matches_a_monte_carlo_simulation():
    rng = np.random.default_rng(0)
    work, delta, m, restart = 10 * 3600.0, 300.0, 6 * 3600.0, 600.0
    tau = daly_interval_s(delta, m)
    predicted = expected_spot_wall_s(work, tau, delta, m, restart)
    # segments of exactly tau: the formula's assumption; 10 h / 3,402.8 s is not whole, so compare on 10 segments
    work10 = 10 * tau
    sim = _simulate(work10, tau, delta, m, restart, 4000, rng)
    pred10 = expected_spot_wall_s(work10, tau, delta, m, restart)
    assert abs(sim - pred10) / pred10 < 0.01  # 4,000 runs: standard error ~0.3%
    assert predicted > work * (1 + delta / tau)  # lost work and restarts cost something on top of the writes


def test_spot_wall_time_limits_are_exact():
    # no interruptions (M -> infinity): work + one checkpoint write per interval
    assert expected_spot_wall_s(3600, 600, 30, 1e12, 600) == pytest.approx(3600 + 6 * 30, rel=1e-6)
    # interval longer than the work: one segment, one final write
    assert expected_spot_wall_s(100, 1e6, 5, 1e12, 0) == pytest.approx(105, rel=1e-6)
    # R = 0, one segment: M (e^(L/M) - 1), the textbook expected completion time
    assert expected_spot_wall_s(3600, 3600, 0, 7200, 0) == pytest.approx(7200 * math.expm1(0.5), rel=1e-12)
    with pytest.raises(ValueError):
        expected_spot_wall_s(3600, 0, 1, 1, 1)
    # restart + segment of 51 mean times between interruptions: never finishes (inf, not an OverflowError)
    assert expected_spot_wall_s(3600, 3600, 0, 100, 1500) == math.inf


def test_spot_bucket_conversion():
    r = rate_from_bucket("<5%")
    assert r.per_hour == pytest.approx(-math.log(0.95) / HOURS_PER_MONTH, rel=1e-12)
    assert r.mtbi_s / 3600 == pytest.approx(14_230.8, rel=1e-4)
    assert rate_from_bucket("5 – 10%").per_hour == pytest.approx(-math.log(0.9) / 730, rel=1e-12)
    assert "lower bound" in rate_from_bucket(">20%").basis
    with pytest.raises(PaddlefitError, match="'<5%'"):
        rate_from_bucket("7%")


#: Seconds to write _target's 1.2e9-byte checkpoint at the default 125 MiB/s.
DELTA = 1_200_000_000 / (125 * MIB)


def _target(name, step, peak=10 * GIB, cap=16 * GIB, fits=True):
    return Target(
        name=name,
        kind="gpu",
        fits=fits,
        peak_bytes=peak,
        capacity_bytes=cap,
        max_batch_size=64,
        step_time_s=step,
        samples_per_s=32 / step,
        calibrated=False,
        grads_bytes=400_000_000,
        checkpoint_bytes=1_200_000_000,
    )


def _plan(targets):
    return Plan(
        model={"name": "m"},
        batch_size=32,
        precision="fp32",
        optimizer="adam",
        devices=1,
        inputs=[],
        memory={},
        targets=targets,
        recommendation={},
        assumptions={"default_efficiency": {"fp32": 0.5}},
    )


def _prices(text):
    return parse_price_csv(HEADER + ",gpu\n" + text, "test.csv")


def test_build_cost_arithmetic_ranking_and_pareto():
    gpus = load_gpus()
    plan = _plan(
        [
            _target("T4", 0.5),
            _target("L4", 0.2),
            _target("A100-SXM4-40GB", 0.05),
            _target("V100-PCIe-16GB", 0.3, fits=False),
        ]
    )
    prices = _prices(
        "c,t4x1,T4,1,4,16,0.50,0.20,r,\n"
        "c,l4x1,L4,1,4,16,0.80,0.30,r,\n"
        "c,a100x8,A100,8,96,1152,30.0,,r,A100-SXM4-40GB\n"
        "c,v100x1,V100,1,8,60,0.10,0.05,r,\n"
        "c,odd,A6000,1,8,60,0.10,,r,\n"
    )
    rate = InterruptionRate(0.1, "test")
    rep = build_cost(
        plan, prices, gpus, dataset_size=10_000, epochs=3, rate=rate, disk_bytes_per_s=100e6, restart_s=300
    )
    rows = {r.instance_type: r for r in rep.rows}
    t4 = rows["t4x1"]
    steps = math.ceil(10_000 / 32) * 3
    assert t4.hours == pytest.approx((steps * 0.5 + 12.0) / 3600, rel=1e-12)  # shorter than an interval: one write
    assert t4.on_demand_usd == pytest.approx(t4.hours * 0.5, rel=1e-12)
    assert t4.checkpoint_write_s == pytest.approx(12.0)
    m = 3600 / 0.1
    assert t4.checkpoint_interval_s == pytest.approx(daly_interval_s(12.0, m))
    assert t4.checkpoint_interval_young_s == pytest.approx(young_interval_s(12.0, m))
    wall = expected_spot_wall_s(steps * 0.5, daly_interval_s(12.0, m), 12.0, m, 300)
    assert t4.spot_expected_usd == pytest.approx(wall / 3600 * 0.20, rel=1e-12)
    # 8 GPUs over NVLink: 400 MB of gradients in paddlefit train's fused buckets, 2 x 128 MiB + 125.5 MiB, each a
    # ring Simple all-reduce (base 8.4 us + 14 x 3.4 us) at the ring's ceiling, 0.8085 x 300 GB/s per direction
    a100 = rows["a100x8"]
    ar = 3 * (CALL_OVERHEAD_S + (8.4 + 14 * 3.4) * 1e-6) + 2 * 7 / 8 * 400_000_000 / (RING_EFFICIENCY * 300e9)
    assert a100.allreduce_s == pytest.approx(ar, rel=1e-12) and a100.interconnect == "nvlink"
    # the figure `plan --devices 8` charges for the same gradients (one function computes both)
    assert a100.allreduce_s == train_gradient_allreduce(get_gpu("A100-SXM4-40GB"), 400_000_000, 8).seconds
    assert a100.hours == pytest.approx((math.ceil(10_000 / 256) * 3 * (0.05 + ar) + 12.0) / 3600, rel=1e-12)
    assert a100.spot_expected_usd is None and a100.gpu_basis == "price file `gpu` column"
    assert not rows["v100x1"].fits and rep.rows[-1].instance_type == "v100x1"  # does not fit: last, never marked
    assert [s["instance_type"] for s in rep.skipped] == ["odd"]
    fit = [r for r in rep.rows if r.fits]
    assert [r.cost_usd for r in fit] == sorted(r.cost_usd for r in fit)
    assert rep.cheapest == "c/" + min(fit, key=lambda r: r.cost_usd).instance_type
    assert rep.fastest == "c/a100x8"
    for r in fit:  # Pareto: nobody is both faster and cheaper
        dominated = any(
            o.cost_hours <= r.cost_hours
            and o.cost_usd <= r.cost_usd
            and (o.cost_hours, o.cost_usd) != (r.cost_hours, r.cost_usd)
            for o in fit
        )
        assert r.pareto == (not dominated)
    small = build_cost(plan, prices, gpus, dataset_size=100, epochs=1, rate=rate, drop_last=True)
    assert {r.instance_type: r.hours for r in small.rows}["t4x1"] == pytest.approx((100 // 32 * 0.5 + DELTA) / 3600)
    assert (
        "global batch 256 exceeds the 100 samples" in {s["instance_type"]: s["reason"] for s in small.skipped}["a100x8"]
    )
    spot = build_cost(plan, prices, gpus, dataset_size=10_000, epochs=3, rate=rate, use_spot=True)
    srows = {r.instance_type: r for r in spot.rows}
    assert srows["t4x1"].cost_basis == "spot (expected)" and srows["a100x8"].cost_basis == "on-demand"
    assert "no spot price: on-demand" in srows["a100x8"].notes
    assert spot.to_dict()["rows"][0]["cost_usd"] == min(r.cost_usd for r in spot.rows if r.fits)


def test_instance_gpu_table_resolves_every_shipped_gpu_we_have_specs_for():
    gpus = {g.name for g in load_gpus()}
    resolved = {(r.cloud, r.instance_type, r.accelerator): gpu_for_instance(r) for r in load_prices()}
    unknown = {k[2] for k, v in resolved.items() if v.gpu not in gpus}
    # cards the GPU catalog has no datasheet row for (yet: L40 and RTX-A6000 are being added to gpus.csv)
    assert unknown <= {"A6000", "RTX6000", "GH200", "L40"} and {"RTX6000", "GH200"} <= unknown
    assert resolved[("lambda", "gpu_1x_a6000", "A6000")].gpu == "RTX-A6000"
    assert resolved[("runpod", "1x_RTX4090_SECURE", "RTX4090")].gpu == "RTX-4090"
    assert resolved[("aws", "p4d.24xlarge", "A100")].gpu == "A100-SXM4-40GB"
    assert resolved[("azure", "Standard_NC24ads_A100_v4", "A100-80GB")].gpu == "A100-PCIe-80GB"
    assert "assumed" in resolved[("lambda", "gpu_1x_a100", "A100")].basis


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


AWS_VMS = """InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,\
AvailabilityZone,Arch
g5.xlarge,A10G,1.0,4.0,16.0,"{'x': 1}",1.006,0.52,us-east-1,use1-az1,x86_64
g5.xlarge,A10G,1.0,4.0,16.0,"{'x': 1}",1.006,0.4591,us-east-1,use1-az2,x86_64
g5.xlarge,A10G,1.0,4.0,16.0,"{'x': 1}",1.006,,us-east-1,use1-az3,x86_64
g5.xlarge,A10G,1.0,4.0,16.0,"{'x': 1}",1.212,0.3,us-west-2,usw2-az1,x86_64
g6f.large,L4,0.125,2.0,8.0,,0.2,0.1,us-east-1,use1-az1,x86_64
m5.large,,,2.0,8.0,,0.096,0.04,us-east-1,use1-az1,x86_64
p5.48xlarge,H100,8.0,192.0,2048.0,,55.04,55.04,us-east-1,use1-az1,x86_64
"""
GCP_VMS = """InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,\
Price,SpotPrice
a2-highgpu-1g,12.0,85.0,A100,1.0,,us-central1,us-central1-a,0.73948,0.36975
,,,A100,1.0,,us-central1,us-central1-a,2.93391,1.4341
n1-standard-8,8.0,30.0,,,,us-central1,us-central1-a,0.38,0.11605
,,,T4,1.0,,us-central1,us-central1-a,0.35,0.175
,,,T4,4.0,,us-central1,us-central1-a,1.4,0.7
"""


def test_skypilot_cache_newest_version_zone_minimum_and_gcp_sums(tmp_path):
    root = tmp_path / "catalogs"
    _write(root / "v7" / "aws" / "vms.csv", AWS_VMS.replace("1.006", "9.99"))
    _write(root / "v8" / "aws" / "vms.csv", AWS_VMS)
    _write(root / "v8" / "gcp" / "vms.csv", GCP_VMS)
    found = load_skypilot_cache(root)
    aws = {r.instance_type: r for r in found["aws"]}
    assert set(aws) == {"g5.xlarge", "p5.48xlarge"}  # no CPU-only rows, no fractional GPUs
    g5 = aws["g5.xlarge"]
    assert (g5.on_demand_usd_per_hour, g5.spot_usd_per_hour, g5.gpu_count, g5.region) == (1.006, 0.4591, 1, "us-east-1")
    assert aws["p5.48xlarge"].spot_usd_per_hour is None  # 55.04 = on-demand: a placeholder
    gcp = {(r.instance_type, r.accelerator, r.gpu_count): r for r in found["gcp"]}
    a2 = gcp[("a2-highgpu-1g", "A100", 1)]
    assert a2.on_demand_usd_per_hour == pytest.approx(0.73948 + 2.93391)
    assert a2.spot_usd_per_hour == pytest.approx(0.36975 + 1.4341)
    assert gcp[("n1-standard-8", "T4", 4)].on_demand_usd_per_hour == pytest.approx(0.38 + 1.4)
    assert ("n1-standard-8", "A100", 1) not in gcp  # A100 has its own host
    west = load_skypilot_cache(root, region="us-west-2")
    assert [r.on_demand_usd_per_hour for r in west["aws"]] == [1.212]
    rows, source = select_prices(skypilot_root=root)
    assert "SkyPilot's cached catalog" in source and {r.cloud for r in rows} == {
        "aws",
        "gcp",
        "azure",
        "lambda",
        "runpod",
    }
    assert sum(r.cloud == "aws" for r in rows) == 2  # the cache replaced the shipped AWS rows


def test_skypilot_cache_bad_value_names_file_line_and_column(tmp_path):
    f = _write(tmp_path / "c" / "v8" / "aws" / "vms.csv", AWS_VMS.replace("0.4591", "cheap"))
    with pytest.raises(CatalogError, match=r"vms.csv`, line 3, column `SpotPrice`: 'cheap' is not a number"):
        load_skypilot_cache(tmp_path / "c")
    with pytest.raises(CatalogError, match="missing column"):
        parse_skypilot_vms("a,b\n1,2\n", "aws", str(f))
    assert load_skypilot_cache(tmp_path / "nothing-here") == {}


def test_select_prices_filters_and_errors(tmp_path):
    rows, _ = select_prices(skypilot_root=None, clouds=["AWS"])
    assert {r.cloud for r in rows} == {"aws"} and len(rows) == 16
    with pytest.raises(CatalogError, match="known: aws, azure, gcp, lambda"):
        select_prices(skypilot_root=None, clouds=["oracle"])
    with pytest.raises(CatalogError, match="aws:us-east-1"):
        select_prices(skypilot_root=None, region="mars-1")
    mine = tmp_path / "mine.csv"
    mine.write_text(HEADER + ",gpu\naliyun,ecs.gn7i,A10,1,8,30,1.9,,cn-beijing,A10\n")
    rows, source = select_prices([str(mine)], skypilot_root=None, region="cn-beijing")
    assert [r.instance_type for r in rows] == ["ecs.gn7i"] and "user prices" in source


def run(*args, home=None):
    env = dict(os.environ, COLUMNS="200")
    if home:
        env["HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", *args], capture_output=True, text=True, env=env, timeout=600
    )


def test_cost_cli_ranks_real_instances_for_the_digits_example(tmp_path):
    root = Path(__file__).resolve().parents[2]
    r = run(
        "cost",
        "--config",
        str(root / "examples" / "digits.yaml"),
        "--json",
        "--spot",
        "--spot-bucket",
        "<5%",
        "--cloud",
        "aws",
        "--cloud",
        "gcp",
        home=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert {"assumptions", "rows", "cheapest", "fastest", "pareto", "skipped"} <= set(d)
    assert "bucket <5%" in d["assumptions"]["interruption_rate_basis"]
    assert all(
        row["interruption_rate_source"] == "--spot-bucket <5%"
        for row in d["rows"]
        if row["spot_usd_per_hour"] is not None
    )  # the option wins over the published buckets
    assert "15 epochs" in d["assumptions"]["job"] and "1,348 samples" in d["assumptions"]["job"]
    rows = d["rows"]
    assert len(rows) == 16 + 11 and all(row["fits"] for row in rows)  # a 10k-parameter CNN fits every GPU
    for row in rows:
        assert row["on_demand_usd"] == pytest.approx(row["hours"] * row["on_demand_usd_per_hour"], rel=1e-9)
        steps = 1348 // (32 * row["gpu_count"]) * 15  # digits.yaml: drop_last (the default), as the trainer counts
        work = steps * row["step_time_s"]  # + one checkpoint write per interval of work, the last one final
        writes = row["checkpoint_write_s"] * work / min(row["checkpoint_interval_s"], work)
        assert row["hours"] == pytest.approx((work + writes) / 3600, rel=1e-9)
    costs = [row["cost_usd"] for row in rows]
    # the cheapest first, the rest by cost; within 1% of the cheapest, fewer GPUs win the tie (tie_to_headroom)
    assert costs[1:] == sorted(costs[1:]) and costs[0] <= 1.01 * min(costs)
    first = rows[0]
    key = f"{first['cloud']}/{first['instance_type']}"
    if first["instance_type"].startswith("n1-"):  # one GCP host type carries several GPU options
        key += f":{first['gpu_count']}x{first['gpu']}"
    # on the Pareto front, unless a 1% tie gave "cheapest" to fewer GPUs over a cheaper, faster row (said so)
    tie = any(t.startswith("cheapest: ") for t in d["tie_breaks"])
    assert d["cheapest"] == key and first["cheapest"] and (first["pareto"] or tie)
    table = run("cost", "--config", str(root / "examples" / "digits.yaml"), "--cloud", "lambda", home=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "cheapest:" in table.stdout and "default 0.0417/h" in table.stdout and "GH200" in table.stdout


@pytest.mark.parametrize(
    "args,msg",
    [
        (["resnet18"], "Give the job length"),
        (
            [
                "resnet18",
                "--dataset-size",
                "10",
                "--epochs",
                "1",
                "--spot-bucket",
                "<5%",
                "--interruptions-per-hour",
                "1",
            ],
            "not both",
        ),
        (["resnet18", "--dataset-size", "10", "--epochs", "1", "--spot-bucket", "sometimes"], "Spot Instance Advisor"),
        (["resnet18", "--dataset-size", "10", "--epochs", "1", "--disk-mib-s", "0"], "--disk-mib-s"),
        (["resnet18", "--dataset-size", "10", "--epochs", "1", "--disk-mbps", "0"], "--disk-mib-s"),  # deprecated alias
        (["resnet18", "--dataset-size", "10", "--epochs", "1", "--cloud", "oracle"], "no prices for that cloud"),
        (["resnet18", "--dataset-size", "10", "--epochs", "1", "--gpu", "H900"], "Unknown GPU"),
    ],
)
def test_cost_cli_bad_input_exits_2(args, msg, tmp_path):
    r = run("cost", *args, home=tmp_path)
    assert r.returncode == 2, r.stderr
    assert msg in r.stderr and "Traceback" not in r.stderr


def _prices_file(tmp_path, body, header=HEADER):
    f = tmp_path / f"p{len(list(tmp_path.glob('p*.csv')))}.csv"  # one file per case: all are built before any run
    f.write_text(header + "\n" + body)
    return str(f)


def test_cost_cli_survives_hostile_price_files_and_extreme_rates(tmp_path):
    cfg = str(Path(__file__).resolve().parents[2] / "examples" / "digits.yaml")
    base = ["cost", "--config", cfg]
    r = run(*base, "--prices", _prices_file(tmp_path, "x,big[/]1,T4,1,4,16,0.5,,r1\n"), "--cloud", "x", home=tmp_path)
    assert r.returncode == 0 and "x big[/]1" in r.stdout, r.stderr  # shown literally, not parsed as rich markup
    cases = [
        (["--interruptions-per-hour", "10000"], "outside 1e-06..3600"),
        (["--prices", _prices_file(tmp_path, "x,a,T4\n")], "line 2, column `region`: empty"),
        (["--prices", _prices_file(tmp_path, "x,a,T4,1,4,16," + "9" * 200_000 + ",,r\n")], "line 2:"),
        (
            ["--prices", _prices_file(tmp_path, "x,a,T4,1,4,16,0.5,,r,Z9000\n", HEADER + ",gpu"), "--cloud", "x"],
            "names gpu 'Z9000'",
        ),
        (["--prices", _prices_file(tmp_path, "x,a,T4,100000,4,16,0.5,,r\n")], "between 0 and 1024"),
        (["--epochs", "1e300", "--dataset-size", "10"], "`--epochs` a number in (0, 1e6]"),
    ]
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    cases.append((["--prices", str(fifo)], "FIFO"))
    for extra, needle in cases:
        r = run(*base, *extra, home=tmp_path)
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, (extra, r.stderr[-800:])
    r = run("cost", "resnet18", "--config", cfg, home=tmp_path)
    assert r.returncode == 2 and "is not the spec's model" in r.stderr


def test_build_cost_counts_the_trainers_steps_with_accumulation_and_max_steps():
    gpus = load_gpus()
    plan = _plan([_target("T4", 0.5)])
    prices = _prices("c,t4x1,T4,1,4,16,0.50,,r,\nc,t4x4,T4,4,16,64,2.0,,r,\n")
    rate = InterruptionRate(0.1, "test")
    rep = build_cost(plan, prices, gpus, dataset_size=100, epochs=1, grad_accum_steps=3, rate=rate)
    rows = {r.instance_type: r for r in rep.rows}
    # global batch 96 without drop_last: ceil(100 / 96) = 2 steps of 3 micro-batches, the second filled up by
    # repeating the epoch's order (the trainer's count)
    assert rows["t4x1"].hours == pytest.approx((2 * 3 * 0.5 + DELTA) / 3600)  # + the one (final) checkpoint
    assert "global batch 384 exceeds the 100 samples" in rep.skipped[0]["reason"]  # less than one global batch
    rep = build_cost(plan, prices, gpus, dataset_size=10_000, epochs=2.5, max_steps=50, rate=rate)
    rows = {r.instance_type: r for r in rep.rows}
    assert rows["t4x1"].hours == pytest.approx((50 * 0.5 + DELTA) / 3600)  # max_steps comes first on one GPU
    t4x4 = rows["t4x4"]  # on four: round(2.5 x ceil(10000 / 128)) = 198 steps, still over 50
    assert t4x4.hours == pytest.approx((50 * t4x4.step_time_s + DELTA) / 3600)
    assert "at most 50 optimizer steps" in rep.assumptions["job"]
    only = build_cost(plan, prices, gpus, dataset_size=None, epochs=None, max_steps=7, rate=rate)
    assert {r.instance_type: r for r in only.rows}["t4x1"].hours == pytest.approx((7 * 0.5 + DELTA) / 3600)
    with pytest.raises(ValueError):
        build_cost(plan, prices, gpus, dataset_size=None, epochs=None, rate=rate)


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"safety_margin": 0}, "`--safety-margin` must be in (0, 1]"),
        ({"top": 0}, "`--top` must be >= 1"),
        ({"disk_mib_s": 0}, "`--disk-mib-s` must be a finite number > 0"),
        ({"restart_minutes": -1}, "`--restart-minutes` must be a finite number >= 0"),
        ({"interruptions_per_hour": 10_000}, "outside 1e-06..3600"),
        ({"region": " "}, "`--region` is empty"),
        ({"interruptions_per_hour": 1, "spot_bucket": "<5%"}, "not both"),
        ({"spot_bucket": "sometimes"}, "Spot Instance Advisor"),
        ({"dataset_size": 10, "epochs": 1e300}, "`--epochs` a number in (0, 1e6]"),
    ],
)
def test_cost_request_checks_itself_with_the_cli_messages(kw, needle):
    from paddlefit.cost.request import CostRequest

    with pytest.raises(PaddlefitError) as exc:
        CostRequest(**kw)
    assert needle in str(exc.value)
    req = CostRequest(spot_bucket="<5%", disk_mib_s=100, restart_minutes=0)
    assert "bucket <5%" in req.rate().basis and req.cost_overrides() == {
        "disk_bytes_per_s": 100 * MIB,
        "restart_s": 0,
    }
    assert CostRequest(interruptions_per_hour=0.5).rate().per_hour == 0.5 and CostRequest().rate() is None


def test_rows_with_gpus_and_price_file_gpu_names():
    from paddlefit.catalog.prices import check_price_gpus, rows_with_gpus

    gpus = load_gpus()
    rows = _prices("c,t4x1,T4,1,4,16,0.50,,r,\nc,l4x1,L4,1,4,16,0.80,,r,\n")
    assert [r.instance_type for r in rows_with_gpus(rows, ["tesla-t4"], gpus)] == ["t4x1"]
    with pytest.raises(CatalogError, match="No priced instance has A100-SXM4-40GB"):
        rows_with_gpus(rows, ["A100-SXM4-40GB"], gpus)
    check_price_gpus(rows, gpus)
    with pytest.raises(CatalogError, match="names gpu 'Z9000'"):
        check_price_gpus(_prices("x,a,T4,1,4,16,0.5,,r,Z9000\n"), gpus)


def test_a_cost_row_repeats_what_its_plan_row_says_the_time_rests_on(tmp_path):
    """An XPU's uncalibrated speed and a tensor peak the catalog lacks (a user row without the L20's tensor peaks:
    the shipped L20 has them) are said on cost rows as on plan rows."""
    from paddlefit.catalog.gpus import catalog_csv, get_gpu

    catalog = tmp_path / "mine.csv"
    catalog.write_text(
        catalog_csv(
            [
                get_gpu("L20").model_copy(
                    update={
                        "name": "MyL20",
                        "aliases": (),
                        "tf32_tflops": None,
                        "fp16_tflops": None,
                        "bf16_tflops": None,
                        "int8_tops": None,
                        "fp8_tflops": None,
                    }
                )
            ]
        )
    )
    prices = tmp_path / "p.csv"
    prices.write_text(HEADER + "\nbaidu,k200-1,Kunlunxin-K200,1,8,32,1.0,,cn\nrunpod,l20x1,MyL20,1,8,32,1.0,,us\n")
    digits = Path(__file__).resolve().parents[2] / "examples" / "digits.yaml"
    r = run(
        "cost",
        "--config",
        str(digits),
        "--prices",
        str(prices),
        "--catalog",
        str(catalog),
        "--gpu",
        "Kunlunxin-K200",
        "--gpu",
        "MyL20",
        "--precision",
        "bf16-o1",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    notes = {row["gpu"]: row["notes"] for row in json.loads(r.stdout)["rows"]}
    assert "uncalibrated: no measured kernels or published runs for Kunlunxin XPUs" in notes["Kunlunxin-K200"]
    assert "no bf16 peak in the catalog: timed at the FP32 peak, a lower bound (the card is faster)" in notes["MyL20"]


def test_instances_within_one_percent_of_the_cheapest_go_to_fewer_gpus_and_say_so():
    """2x T4 at 0.6% less than 1x T4 is a tie; the single GPU (no all-reduce, simpler) wins and
    the report says which tie-break applied."""
    t4 = Target(
        name="T4",
        kind="gpu",
        fits=True,
        peak_bytes=4 * GIB,
        capacity_bytes=16 * GIB,
        max_batch_size=64,
        step_time_s=0.5,
        samples_per_s=64.0,
        calibrated=False,
        grads_bytes=1000,
        checkpoint_bytes=1_000_000,
    )
    a10 = Target(
        name="A10",
        kind="gpu",
        fits=True,
        peak_bytes=4 * GIB,
        capacity_bytes=24 * GIB,
        max_batch_size=64,
        step_time_s=0.2,
        samples_per_s=160.0,
        calibrated=False,
        grads_bytes=1000,
        checkpoint_bytes=1_000_000,
    )
    prices = _prices(
        "c,t4x1,T4,1,4,16,0.50,,r,\nc,t4x2,T4,2,8,32,0.994,,r,\n"
        "c,a10x1,A10,1,4,16,1.40,,r,\nc,a10x2,A10,2,8,32,2.80,,r,\n"
    )
    rep = build_cost(
        _plan([t4, a10]), prices, load_gpus(), dataset_size=64_000, epochs=1, rate=InterruptionRate(0.1, "test")
    )
    rows = {r.instance_type: r for r in rep.rows}
    assert rows["t4x2"].cost_usd < rows["t4x1"].cost_usd < rows["t4x2"].cost_usd * 1.01  # a tie, 2x cheaper by cents
    assert rep.cheapest == "c/t4x1" and rows["t4x1"].cheapest and rep.rows[0].instance_type == "t4x1"
    assert rows["a10x2"].hours * 1.01 < rows["a10x1"].hours  # not a tie: the faster 2x A10 stays fastest
    assert rep.fastest == "c/a10x2"
    said = " ".join(rep.tie_breaks)
    assert "cheapest" in said and "within 1%" in said and "fewer GPUs" in said and "t4x2" in said
    assert rep.to_dict()["tie_breaks"] == rep.tie_breaks


def test_a_requested_gpu_without_a_priced_instance_is_said_not_dropped(tmp_path):
    """`--gpu RTX-4090 --gpu L20` priced the RTX-4090 and dropped L20 silently."""
    digits = Path(__file__).resolve().parents[2] / "examples" / "digits.yaml"
    args = ("cost", "--config", str(digits), "--gpu", "RTX-4090", "--gpu", "L20", "--shipped-prices")
    r = run(*args, "--json", home=tmp_path)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert {row["gpu"] for row in d["rows"]} == {"RTX-4090"}
    clouds = ", ".join(sorted({p.cloud for p in load_prices()}))
    from paddlefit.catalog.prices import price_template

    assert d["skipped"] == [
        {
            "gpu": "L20",
            "reason": f"no priced instance in the price table (clouds: {clouds}); add "
            f"your provider's with --prices FILE (a template in CNY: {price_template()})",
        }
    ]
    table = run(*args, home=tmp_path)
    assert table.returncode == 0, table.stderr
    assert f"L20: no priced instance in the price table (clouds: {clouds})" in table.stdout


def test_on_demand_hours_count_the_same_checkpoint_writes_as_spot():
    """Spot hours carried the checkpoint writes and on-demand hours did not, so a short job
    cost more on spot at a lower price. `train` writes them either way: both count one write per Daly interval;
    spot adds only lost work and restarts."""
    gpus = load_gpus()
    plan = _plan([_target("T4", 0.5)])
    prices = _prices("c,t4x1,T4,1,4,16,0.50,0.20,r,\nc,t4od,T4,1,4,16,0.50,,r,\n")
    rate = InterruptionRate(0.1, "test")
    rep = build_cost(
        plan, prices, gpus, dataset_size=100_000, epochs=3, rate=rate, disk_bytes_per_s=100e6, restart_s=300
    )
    rows = {r.instance_type: r for r in rep.rows}
    t4 = rows["t4x1"]
    work, m = math.ceil(100_000 / 32) * 3 * 0.5, 3600 / 0.1
    tau = daly_interval_s(12.0, m)
    assert tau < work  # several writes
    assert t4.checkpoint_interval_s == pytest.approx(tau)
    assert t4.hours == pytest.approx((work + work / tau * 12.0) / 3600, rel=1e-12)  # the writes, on-demand too
    assert t4.on_demand_usd == pytest.approx(t4.hours * 0.5, rel=1e-12)
    assert t4.spot_hours == pytest.approx(expected_spot_wall_s(work, tau, 12.0, m, 300) / 3600, rel=1e-12)
    assert t4.spot_hours > t4.hours
    # a row without a spot price writes checkpoints at the same interval (the default rate's Daly interval)
    od = rows["t4od"]
    tau_od = daly_interval_s(12.0, 3600 / 0.1)
    assert od.hours == pytest.approx((work + work / tau_od * 12.0) / 3600, rel=1e-12)
    # no interruptions: spot time is the on-demand time (the same writes), and spot at a lower price costs less
    calm = build_cost(
        plan,
        prices,
        gpus,
        dataset_size=100_000,
        epochs=3,
        rate=InterruptionRate(1e-9, "calm"),
        disk_bytes_per_s=100e6,
        restart_s=300,
    )
    c = {r.instance_type: r for r in calm.rows}["t4x1"]
    assert c.spot_hours == pytest.approx(c.hours, rel=1e-6)
    assert c.spot_expected_usd == pytest.approx(c.hours * 0.20, rel=1e-6) and c.spot_expected_usd < c.on_demand_usd
    # a job shorter than one interval writes one (final) checkpoint either way
    short = build_cost(plan, prices, gpus, dataset_size=64, epochs=1, rate=rate, disk_bytes_per_s=100e6, restart_s=300)
    s = {r.instance_type: r for r in short.rows}["t4x1"]
    assert s.hours == pytest.approx((2 * 0.5 + 12.0) / 3600, rel=1e-12)


@pytest.mark.parametrize("args", [("--gpu", "RTX-4090", "--spot"), ("--cloud", "aws", "--top", "5")])
def test_cost_output_fits_80_columns(args, tmp_path):
    """At COLUMNS=80 the table was 104 (--spot) and 82 (--cloud aws --top 5) columns wide
    and the assumption lines up to 634 characters: every line now fits, nothing is cut to '…'."""
    digits = Path(__file__).resolve().parents[2] / "examples" / "digits.yaml"
    env = dict(os.environ, COLUMNS="80", HOME=str(tmp_path))
    r = subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", "cost", "--config", str(digits), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert "…" not in r.stdout and "cheapest:" in r.stdout and "assumptions:" in r.stdout
    flat = "".join(r.stdout.split())  # what wrapped or folded is all there once the line breaks go
    assert "notincluded:storage,egress,datadownload,instancestart-upbeforetraining,evaluationtime" in flat


def test_cost_takes_the_label_options_plan_takes_and_times_the_job_as_plan_does(tmp_path, data_dir):
    """A new user's finding: `cost` had no --label/--label-arg/--loss, so a model that computes its own loss from
    `labels=` was costed on another loss than `plan` timed. Both now probe the same job: the one-GPU T4 row's step
    time is plan's T4 step time."""
    job = [
        "tinymodels:KeywordModel",
        "-i",
        "input_ids=int64[10]:40",
        "--label",
        "int64[]:3",
        "--label-arg",
        "labels",
        "-b",
        "8",
        "--gpu",
        "T4",
        "--json",
    ]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(data_dir), os.environ.get("PYTHONPATH", "")]), HOME=str(tmp_path)
    )
    cli = [sys.executable, "-m", "paddlefit.cli.main"]
    p = subprocess.run([*cli, "plan", *job], capture_output=True, text=True, env=env, timeout=300)
    c = subprocess.run(
        [*cli, "cost", *job, "--dataset-size", "800", "--epochs", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert p.returncode == 0 and c.returncode == 0, (p.stderr, c.stderr)
    plan = json.loads(p.stdout)
    assert plan["model"]["loss"] == "the model's own loss"
    (t4,) = [t["step_time_s"] for t in plan["targets"] if t["name"] == "T4"]
    one = [row["step_time_s"] for row in json.loads(c.stdout)["rows"] if row["gpu_count"] == 1]
    assert one and all(s == pytest.approx(t4, rel=1e-6) for s in one)
    assert json.loads(c.stdout)["assumptions"]["job"].endswith("; loss: the model's own loss")  # said, as plan says it


def test_cost_writes_checkpoints_at_the_specs_cadence_as_train_does(tmp_path):
    """A new user's finding: `cost --config` priced one checkpoint write per Daly interval while `train` writes at
    the spec's `checkpoint.every_steps` / `every_minutes` (auto_interval off), 47 writes against 1 on a 3-epoch
    job. Cost now uses the spec's cadence, shows the Daly optimum beside it, and uses Daly with auto_interval."""
    root = Path(__file__).resolve().parents[2]
    spec = (root / "examples" / "digits.yaml").read_text()  # checkpoint: every_steps 200, every_minutes 10
    auto = tmp_path / "auto.yaml"
    auto.write_text(
        spec.replace("checkpoint: {every_steps: 200,", "checkpoint: {auto_interval: true, every_steps: 200,")
    )
    assert "auto_interval: true" in auto.read_text()
    docs = {}
    for name, path in (("cadence", root / "examples" / "digits.yaml"), ("auto", auto)):
        r = run("cost", "--config", str(path), "--gpu", "T4", "--cloud", "gcp", "--json", home=tmp_path)
        assert r.returncode == 0, r.stderr
        docs[name] = json.loads(r.stdout)
    for row in docs["cadence"]["rows"]:
        assert row["checkpoint_interval_s"] == pytest.approx(min(200 * row["step_time_s"], 600), rel=1e-12)
        daly = daly_interval_s(row["checkpoint_write_s"], row["mean_time_between_interruptions_h"] * 3600)
        assert row["checkpoint_interval_daly_s"] == pytest.approx(daly, rel=1e-12)
    assert "every 200 optimizer steps or every 10 minutes" in docs["cadence"]["assumptions"]["checkpoint_interval"]
    for row in docs["auto"]["rows"]:
        assert row["checkpoint_interval_s"] == row["checkpoint_interval_daly_s"]
    assert docs["auto"]["assumptions"]["checkpoint_interval"].startswith("Daly (2006) higher-order optimum")


def test_cost_with_no_row_of_a_catalog_gpu_is_an_error_not_an_empty_table(tmp_path):
    """A price file whose every row names a GPU the catalog lacks prices nothing: exit 2 naming the rows and the fix
    (before the model is planned), and one JSON error under --json; an empty table with exit 0 was no answer."""
    prices = tmp_path / "p.csv"
    prices.write_text(HEADER + "\nmycloud,x1,NOSUCHGPU,1,4,16,1.0,,r1\n")
    args = ["cost", "lenet", "--dataset-size", "1000", "--epochs", "1", "--prices", str(prices), "--cloud", "mycloud"]
    r = run(*args, home=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "No instance can be priced" in r.stderr and "mycloud x1 (NOSUCHGPU)" in r.stderr, r.stderr
    j = run(*args, "--json", home=tmp_path)
    assert j.returncode == 2 and json.loads(j.stdout)["error"]["exit_code"] == 2, j.stdout
