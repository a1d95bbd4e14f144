"""Spot interruption rate per instance: the shipped AWS Spot Instance Advisor buckets, their conversion to a mean
time between interruptions and Daly's checkpoint interval, the default where nothing is published, and ``cost``
pricing an RTX 4090 from its sourced price with the rate's source in ``--json``."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddlefit.catalog.prices import load_prices
from paddlefit.catalog.spot_advisor import BUCKETS, advisor_buckets, aws_bucket, parse_advisor_csv
from paddlefit.cost.checkpoint_interval import daly_interval_s
from paddlefit.cost.spot_risk import (
    DEFAULT_SOURCE,
    GCP_SPOT_DOCS,
    InterruptionRate,
    rate_from_bucket,
    spot_rate,
)
from paddlefit.errors import CatalogError


def _row(cloud, itype):
    return next(r for r in load_prices() if r.cloud == cloud and r.instance_type == itype)


def test_bucket_5_to_10_percent_per_month_gives_the_mtbi_and_daly_interval():
    # f = 0.10 (upper edge); r = -ln(0.9) / 730 h; MTBI = 730 / ln(10/9) h = 6,928.59 h
    rate = rate_from_bucket("5-10%")
    assert rate.per_hour == pytest.approx(math.log(10 / 9) / 730, rel=1e-15)
    assert rate.mtbi_h == pytest.approx(6928.59175415183, rel=1e-12)
    # Daly (2006) with a 5-minute checkpoint write: sqrt(2 d M) (1 + sqrt(d/2M)/3 + d/(18 M)) - d
    m = rate.mtbi_s
    assert m == pytest.approx(24942930.31494659, rel=1e-12)
    x = 300 / (2 * m)
    assert daly_interval_s(300, m) == pytest.approx(math.sqrt(600 * m) * (1 + math.sqrt(x) / 3 + x / 9) - 300)
    assert daly_interval_s(300, m) == pytest.approx(122134.69740418962, rel=1e-12)  # 33.9 h
    assert rate_from_bucket(">20%").per_hour == rate_from_bucket("15-20%").per_hour  # 20%: >20%'s lower bound


def test_shipped_advisor_extract_is_read_and_sane():
    table = advisor_buckets()
    assert len(table) == 682 and set(table.values()) <= set(BUCKETS)
    assert aws_bucket("us-east-1", "g4dn.xlarge") == "15-20%"  # spotinfo@5eedf20a: r = 3
    assert aws_bucket("us-east-1", "p4de.24xlarge") == "<5%"
    assert aws_bucket("us-east-1", "m5.large") is None  # GPU families only


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("us-east-1,g5.xlarge,sometimes\n", "line 2, column `interruption_bucket`: 'sometimes' is not one of"),
        ("us-east-1,,<5%\n", "line 2, column `instance_type`: empty"),
        ("us-east-1,g5.xlarge,<5%\nus-east-1,g5.xlarge,>20%\n", "line 3: us-east-1 g5.xlarge is listed twice"),
    ],
)
def test_bad_advisor_rows_name_line_and_column(body, needle):
    with pytest.raises(CatalogError, match=needle.replace("(", r"\(")):
        parse_advisor_csv("region,instance_type,interruption_bucket\n" + body, "adv.csv")


def test_each_instance_gets_its_published_bucket_or_the_default():
    aws = spot_rate(_row("aws", "g4dn.xlarge"))  # us-east-1: 15-20%
    assert aws.per_hour == pytest.approx(-math.log(0.8) / 730, rel=1e-15)
    assert "spot-advisor-data.json" in aws.source and "5eedf20a" in aws.source
    assert "us-east-1 g4dn.xlarge: AWS Spot Instance Advisor bucket 15-20%" in aws.basis
    for cloud, itype, why in [
        ("gcp", "g2-standard-4", GCP_SPOT_DOCS),
        ("azure", "Standard_NC4as_T4_v3", "Resource Graph"),
        ("runpod", "1x_RTX4090_SECURE", "RunPod publishes no"),
    ]:
        d = spot_rate(_row(cloud, itype))
        assert (d.per_hour, d.source) == (1 / 24, DEFAULT_SOURCE) and why in d.basis
    mine = InterruptionRate(0.5, "--interruptions-per-hour 0.5", "--interruptions-per-hour 0.5")
    assert spot_rate(_row("aws", "g4dn.xlarge"), mine) is mine  # an option the user gave wins


def run(*args, home):
    env = dict(os.environ, COLUMNS="200", HOME=str(home))  # HOME: no SkyPilot cache, the shipped prices
    return subprocess.run(
        [sys.executable, "-m", "paddlefit.cli.main", *args], capture_output=True, text=True, env=env, timeout=600
    )


def test_cost_prices_an_rtx_4090_and_json_carries_each_rows_rate_source(tmp_path):
    root = Path(__file__).resolve().parents[2]
    r = run(
        "cost",
        "--config",
        str(root / "examples" / "digits.yaml"),
        "--gpu",
        "RTX-4090",
        "--gpu",
        "L4",
        "--spot",
        "--json",
        home=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    rows = {(row["cloud"], row["instance_type"]): row for row in json.loads(r.stdout)["rows"]}
    rtx = rows[("runpod", "1x_RTX4090_SECURE")]  # skypilot-catalog v8 runpod @46062acb: 0.59 on-demand, 0.29 spot
    assert (rtx["gpu"], rtx["gpu_count"], rtx["on_demand_usd_per_hour"], rtx["spot_usd_per_hour"]) == (
        "RTX-4090",
        1,
        0.59,
        0.29,
    )
    assert rtx["on_demand_usd"] == pytest.approx(rtx["hours"] * 0.59, rel=1e-12)
    assert rtx["interruption_rate_source"] == DEFAULT_SOURCE and rtx["interruptions_per_hour"] == 1 / 24
    assert {k[1] for k in rows if k[0] == "runpod"} == {
        "1x_RTX4090_SECURE",
        "2x_RTX4090_SECURE",
        "4x_RTX4090_SECURE",
        "8x_RTX4090_SECURE",
    }
    g6 = rows[("aws", "g6.xlarge")]  # us-east-1 advisor bucket >20%
    assert "spot-advisor-data.json" in g6["interruption_rate_source"] and "bucket >20%" in g6["interruption_rate_basis"]
    assert g6["mean_time_between_interruptions_h"] == pytest.approx(730 / math.log(1 / 0.8), rel=1e-12)
    assert g6["checkpoint_interval_daly_s"] == pytest.approx(
        daly_interval_s(g6["checkpoint_write_s"], g6["mean_time_between_interruptions_h"] * 3600), rel=1e-12
    )
    assert rows[("gcp", "g2-standard-4")]["interruption_rate_source"] == DEFAULT_SOURCE
