"""Cloud price catalog: the shipped SkyPilot extract, its known defects, user CSVs and bad rows."""

import pytest

from paddlefit.catalog.price_csv import parse_price_csv
from paddlefit.catalog.prices import load_prices
from paddlefit.errors import CatalogError

HEADER = (
    "cloud,instance_type,accelerator,accelerator_count,vcpus,memory_gib,price_usd_per_hour,spot_usd_per_hour,region"
)


def _by_type(rows):
    return {r.instance_type: r for r in rows}


def test_shipped_catalog_rows_and_values():
    rows = load_prices()
    assert len(rows) == 61
    assert sorted({r.cloud for r in rows}) == ["aws", "azure", "gcp", "lambda", "runpod"]
    t = _by_type(rows)
    g4 = t["g4dn.xlarge"]  # copied verbatim from the CSV row
    assert (g4.accelerator, g4.gpu_count, g4.vcpus, g4.on_demand_usd_per_hour, g4.spot_usd_per_hour) == (
        "T4",
        1,
        4,
        0.526,
        0.2069,
    )
    assert g4.source == "catalogs/v8/aws/vms.csv@e385a0d348ed" and g4.notes == ()
    assert all(r.spot_usd_per_hour is None for r in rows if r.cloud == "lambda")  # Lambda has no spot market


def test_shipped_runpod_rows_are_the_skypilot_catalog_values():
    """RunPod rows copied from skypilot-catalog catalogs/v8/runpod/vms.csv @46062acb (SOURCES-prices.md)."""
    t = _by_type(load_prices())
    want = {
        "1x_RTX4090_SECURE": ("RTX4090", 1, 0.59, 0.29),
        "2x_RTX4090_SECURE": ("RTX4090", 2, 1.18, 0.58),
        "4x_RTX4090_SECURE": ("RTX4090", 4, 2.36, 1.16),
        "8x_RTX4090_SECURE": ("RTX4090", 8, 4.72, 2.32),
        "1x_L40S_SECURE": ("L40S", 1, 0.86, 0.26),
        "1x_L40_SECURE": ("L40", 1, 1.07, 0.5),
    }
    for itype, (acc, n, od, spot) in want.items():
        r = t[itype]
        assert (r.cloud, r.accelerator, r.gpu_count, r.on_demand_usd_per_hour, r.spot_usd_per_hour, r.region) == (
            "runpod",
            acc,
            n,
            od,
            spot,
            "US",
        )
        assert r.source == "catalogs/v8/runpod/vms.csv@46062acbb2c0" and r.notes == ()


def test_known_catalog_defects_are_handled():
    t = _by_type(load_prices())
    nd = t["Standard_ND96isr_H100_v5"]
    assert nd.gpu_count == 8 and nd.spot_usd_per_hour is None and nd.on_demand_usd_per_hour == 98.32
    assert any("has 8" in n for n in nd.notes) and any("placeholder" in n for n in nd.notes)
    assert any("below the list price" in n for n in t["a3-highgpu-8g"].notes)


def test_user_csv_adds_and_replaces_rows(tmp_path):
    f = tmp_path / "mine.csv"
    f.write_text(
        "region,cloud,instance_type,accelerator,accelerator_count,vcpus,memory_gib,price_usd_per_hour,"
        "spot_usd_per_hour,extra\n"
        "cn-beijing,aliyun,ecs.gn7i-c8g1.2xlarge,A10,1,8,30,1.9,,x\n"
        "us-east-1,aws,g4dn.xlarge,T4,1,4,16,0.40,0.15,y\n"
    )
    rows = load_prices([str(f)])
    t = _by_type(rows)
    assert len(rows) == 62  # one added, one replaced
    assert t["ecs.gn7i-c8g1.2xlarge"].spot_usd_per_hour is None and t["ecs.gn7i-c8g1.2xlarge"].cloud == "aliyun"
    assert t["g4dn.xlarge"].on_demand_usd_per_hour == 0.40 and t["g4dn.xlarge"].source == str(f)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("aws,x,T4,1,4,16,abc,,r\n", "line 2, column `price_usd_per_hour`: 'abc' is not a number"),
        ("aws,x,T4,1.5,4,16,1,,r\n", "line 2, column `accelerator_count`: '1.5' is not a whole number"),
        ("aws,x,T4,0,4,16,1,,r\n", "column `accelerator_count`: must be >= 1"),
        ("aws,x,T4,1,4,16,nan,,r\n", "'nan' is not a finite number"),
        ("aws,x,T4,1,4,16,1,,r\naws,,T4,1,4,16,1,,r\n", "line 3, column `instance_type`: empty"),
        ("aws,x,T4,1,4,16,1,,r\naws,x,T4,1,4,16,2,,r\n", "line 3: aws x in region r is also on line 2; one price"),
    ],
)
def test_bad_rows_name_file_line_and_column(body, needle):
    with pytest.raises(CatalogError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        parse_price_csv(HEADER + "\n" + body, "mine.csv")


def test_missing_column_is_named():
    with pytest.raises(CatalogError, match="missing column\\(s\\) spot_usd_per_hour"):
        parse_price_csv(HEADER.replace(",spot_usd_per_hour", "") + "\n", "mine.csv")


def test_header_with_spaces_after_commas_is_read():
    rows = parse_price_csv(HEADER.replace(",", ", ") + "\nx, t1, T4, 1, 4, 16, 0.5, , r\n", "spaced.csv")
    assert (rows[0].cloud, rows[0].instance_type, rows[0].gpu_count, rows[0].on_demand_usd_per_hour) == (
        "x",
        "t1",
        1,
        0.5,
    )


def test_instance_price_from_the_shipped_catalog(tmp_path, monkeypatch):
    from paddlefit.catalog.prices import instance_price
    from paddlefit.errors import PaddlefitError

    monkeypatch.setenv("HOME", str(tmp_path))  # no SkyPilot cache: the shipped snapshot
    g5 = _by_type(load_prices())["g5.xlarge"]
    assert instance_price("g5.xlarge", None, False) == g5.on_demand_usd_per_hour
    assert instance_price(" G5.XLARGE ", "aws", True) == g5.spot_usd_per_hour
    for args, needle in [
        (("g5.xlargee", None, False), "Did you mean: g5.xlarge"),
        (("n1-standard-8", None, False), "several prices"),
        (("gpu_1x_a10", None, True), "no spot price"),
    ]:
        with pytest.raises(PaddlefitError, match=needle):
            instance_price(*args)
