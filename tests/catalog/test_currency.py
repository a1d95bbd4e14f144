"""Prices in the user's currency: rates the user gives, price files in CNY, and amounts printed in CNY."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddlefit.catalog.currency import USD, Currency, display_currency, parse_fx_rates
from paddlefit.catalog.price_csv import PRICE_TEMPLATE, parse_price_csv
from paddlefit.catalog.prices import price_template, unpriced_gpus
from paddlefit.errors import CatalogError, PaddlefitError

CNY_FILE = """# prices copied from my provider's page on 2026-12-01
cloud,instance_type,accelerator,accelerator_count,vcpus,memory_gib,price_per_hour,spot_per_hour,currency,region,gpu
mycloud,h20-x1,H20,1,16,240,35.5,,CNY,cn-north,H20
# a usd row in the same file
mycloud,l20-x1,L20,1,16,120,1.25,,USD,cn-north,L20
mycloud,4090d-x1,RTX-4090D,1,16,60,2.5,1.2,CNY,cn-north,RTX-4090D
"""


def test_rates_and_the_display_currency():
    assert parse_fx_rates(["CNY=7.1", "eur=0.92"]) == {"CNY": 7.1, "EUR": 0.92}
    for bad in (["CNY"], ["CNY=0"], ["CNY=-7"], ["CNY=abc"], ["YUAN=7"], ["CNY=inf"], ["USD=2"], ["CNY=7", "CNY=8"]):
        with pytest.raises(PaddlefitError, match="--fx-rate"):
            parse_fx_rates(bad)
    assert display_currency(None, {}) is USD and display_currency("usd", {}) is USD
    cny = display_currency("cny", {"CNY": 7.1})
    assert (cny.code, cny.per_usd, cny.symbol) == ("CNY", 7.1, "¥")
    with pytest.raises(PaddlefitError, match="--fx-rate CNY=RATE"):
        display_currency("CNY", {})
    with pytest.raises(PaddlefitError, match="ISO 4217"):
        display_currency("yuan", {"CNY": 7.1})


def test_one_formatter_for_every_amount():
    assert [USD.fmt(v) for v in (None, 0.0, 0.0031, 12.345, 1234.5)] == ["-", "$0", "$0.0031", "$12.35", "$1,234"]
    cny = Currency("CNY", 7.1, "test")
    assert cny.fmt(1.0) == "¥7.10" and cny.fmt(100.0) == "¥710" and cny.fmt(0.001) == "¥0.0071"
    assert Currency("EUR", 0.5, "test").fmt(10.0) == "EUR 5.00"


def test_a_cny_price_file_is_converted_to_usd_with_comments_and_line_numbers_kept():
    rows = parse_price_csv(CNY_FILE, "cny.csv", {"CNY": 7.1})
    h20, l20, d = rows
    assert h20.on_demand_usd_per_hour == pytest.approx(35.5 / 7.1) and h20.spot_usd_per_hour is None
    assert "priced in CNY, at 7.1 CNY per USD" in h20.notes[0]
    assert l20.on_demand_usd_per_hour == 1.25 and not l20.notes
    assert d.spot_usd_per_hour == pytest.approx(1.2 / 7.1)
    with pytest.raises(CatalogError, match=r"line 3: prices in CNY; add `--fx-rate CNY=RATE`"):
        parse_price_csv(CNY_FILE, "cny.csv")
    bad = CNY_FILE.replace("2.5,1.2,CNY", "2.5,1.2,RMB!")
    with pytest.raises(CatalogError, match=r"line 6, column `currency`"):
        parse_price_csv(bad, "cny.csv", {"CNY": 7.1})
    with pytest.raises(CatalogError, match=r"line 2: missing column\(s\) price_per_hour"):
        parse_price_csv(CNY_FILE.replace("price_per_hour", "price"), "cny.csv", {"CNY": 7.1})


def test_the_shipped_template_parses_and_the_unpriced_cards_point_to_it():
    text = Path(price_template()).read_text(encoding="utf-8")
    assert price_template().endswith(PRICE_TEMPLATE) and parse_price_csv(text, "template") == []
    filled = "\n".join(line[2:] if line.startswith("# mycloud") else line for line in text.splitlines())
    rows = parse_price_csv(filled.replace("PRICE", "10"), "template", {"CNY": 7.0})
    assert {r.gpu for r in rows} == {"A800-SXM4-80GB", "H800-SXM", "H20", "L20", "RTX-4090D"}
    from paddlefit.catalog.gpus import load_gpus
    from paddlefit.catalog.prices import load_prices

    (h20,) = unpriced_gpus(load_prices(()), ["H20"], load_gpus())
    assert price_template() in h20["reason"]


def test_cost_prints_cny_and_its_json_keeps_usd_with_the_rate(tmp_path):
    prices = tmp_path / "cny.csv"
    prices.write_text(CNY_FILE)
    base = [
        sys.executable,
        "-m",
        "paddlefit",
        "cost",
        "--config",
        str(Path("examples/digits.yaml").resolve()),
        "--gpu",
        "H20",
        "--prices",
        str(prices),
        "--fx-rate",
        "CNY=7.1",
    ]
    env = dict(os.environ, COLUMNS="200", PADDLEFIT_HOME=str(tmp_path / "home"))
    r = subprocess.run([*base, "--currency", "CNY", "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-1500:]
    doc = json.loads(r.stdout)
    assert doc["currency"] == {"code": "CNY", "per_usd": 7.1, "source": "--fx-rate CNY=7.1"}
    (row,) = [x for x in doc["rows"] if x["instance_type"] == "h20-x1"]
    assert row["on_demand_usd"] == pytest.approx(5.0 * row["hours"], rel=1e-9)  # 35.5 CNY/h = 5 USD/h
    t = subprocess.run([*base, "--currency", "CNY"], capture_output=True, text=True, env=env, timeout=600)
    assert t.returncode == 0 and "¥" in t.stdout and "amounts in CNY at 7.1 CNY per USD" in t.stdout
    no_rate = subprocess.run([*base[:-2], "--currency", "CNY"], capture_output=True, text=True, env=env, timeout=600)
    assert no_rate.returncode == 2 and "--fx-rate CNY=RATE" in no_rate.stderr


def test_price_files_as_editors_save_them():
    from paddlefit.catalog.prices import merge_price_files

    lf = CNY_FILE.replace("# prices copied", "\n\n# prices copied")  # blank lines before the header
    assert len(parse_price_csv(lf, "blank.csv", {"CNY": 7.1})) == 3
    with pytest.raises(CatalogError, match=r"line 5: prices in CNY"):  # the file's own line numbers after blanks
        parse_price_csv(lf, "blank.csv")
    cr = CNY_FILE.replace("\n", "\r")  # classic Mac line ends: comments still comments
    assert [r.instance_type for r in parse_price_csv(cr, "cr.csv", {"CNY": 7.1})] == ["h20-x1", "l20-x1", "4090d-x1"]
    ragged = CNY_FILE.replace("2.5,1.2,CNY,cn-north,RTX-4090D", "2.5,1.2,CNY,cn-north,RTX-4090D,extra")
    with pytest.raises(CatalogError, match=r"line 6: 1 field\(s\) more than the header's 11"):
        parse_price_csv(ragged, "ragged.csv", {"CNY": 7.1})
    for empty in ("", "# only a comment\n", "\n\n"):
        with pytest.raises(CatalogError, match="no header line"):
            parse_price_csv(empty, "empty.csv")
    with pytest.raises(CatalogError, match=r"column `currency`: ÄÖÜ"):
        parse_price_csv(CNY_FILE.replace("35.5,,CNY", "35.5,,ÄÖÜ"), "odd.csv", {"CNY": 7.1})
    with pytest.raises(CatalogError, match=r"no price rows \(every row commented out"):
        merge_price_files([], [price_template()], {"CNY": 7.1})


def test_fx_rates_outside_any_currency_are_refused():
    for bad in (["CNY=1e300"], ["CNY=1e-300"], ["CNY=1_000"], ["CNY=７"], ["CNY=0.00001"], ["CNY=2e6"]):
        with pytest.raises(PaddlefitError, match=r"between 0\.0001 and 1e"):
            parse_fx_rates(bad)
    assert parse_fx_rates(["IRR=420000", "KWD=0.31", "CNY=7."]) == {"IRR": 420000.0, "KWD": 0.31, "CNY": 7.0}
