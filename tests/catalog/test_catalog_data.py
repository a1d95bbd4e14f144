"""catalog/data/cuda_drivers.csv and paddle_flags.csv: every row sourced and dated, values sane, and the loaders
(catalog/cuda.py, catalog/flags.py) return exactly what the files hold."""

from __future__ import annotations

import csv
import re
from datetime import date
from importlib import resources

import pytest

from paddlefit.catalog.cuda import load_cuda_drivers, major_floor_driver, toolkit_min_driver, version_tuple
from paddlefit.catalog.flags import current_flags, get_flag, load_flags, removed_flags


def rows(name: str) -> list[dict[str, str]]:
    text = resources.files("paddlefit.catalog").joinpath(f"data/{name}").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


@pytest.mark.parametrize("name", ["cuda_drivers.csv", "paddle_flags.csv"])
def test_every_row_has_a_source_and_a_retrieved_date(name: str) -> None:
    for r in rows(name):
        assert re.match(r"https://\S+", r["source"]), r
        assert date.fromisoformat(r["retrieved"]) <= date.today(), r


def test_cuda_driver_rows_are_sane_and_loaded_as_written() -> None:
    file_rows = rows("cuda_drivers.csv")
    assert [(r.cuda, r.rule, r.min_linux_driver_version) for r in load_cuda_drivers()] == [
        (r["cuda"], r["rule"], r["min_linux_driver_version"]) for r in file_rows
    ]
    keys = [(r["cuda"], r["rule"]) for r in file_rows]
    assert len(keys) == len(set(keys))
    toolkit = [r for r in file_rows if r["rule"] == "toolkit"]
    floors = {r["cuda"]: r["min_linux_driver_version"] for r in file_rows if r["rule"] == "major-floor"}
    assert toolkit and floors and len(toolkit) + len(floors) == len(file_rows)
    for r in toolkit:
        assert re.fullmatch(r"\d+\.\d+", r["cuda"])
        assert re.fullmatch(r"\d{3}(\.\d+){1,2}", r["min_linux_driver_version"])
        major = r["cuda"].split(".")[0]
        assert major in floors  # every toolkit has its major's compatibility floor ...
        assert version_tuple(floors[major]) <= version_tuple(r["min_linux_driver_version"])  # ... at or below it
        assert toolkit_min_driver(r["cuda"]) == r["min_linux_driver_version"]
        assert major_floor_driver(r["cuda"]) == floors[major]
    # newer toolkits never need an older driver
    ordered = sorted(toolkit, key=lambda r: version_tuple(r["cuda"]))
    drivers = [version_tuple(r["min_linux_driver_version"]) for r in ordered]
    assert drivers == sorted(drivers)
    assert toolkit_min_driver("10.2") is None and major_floor_driver("10.2") is None


def test_flag_rows_are_sane_and_loaded_as_written() -> None:
    file_rows = rows("paddle_flags.csv")
    flags = load_flags()
    assert [f.name for f in flags] == [r["name"] for r in file_rows]
    assert len({r["name"] for r in file_rows}) == len(file_rows)
    assert current_flags() == [r["name"] for r in file_rows if r["status"] == "current"]
    assert removed_flags() == {r["name"]: r["meaning"] for r in file_rows if r["status"] == "removed"}
    for r in file_rows:
        assert r["name"].startswith("FLAGS_") and r["status"] in ("current", "removed") and r["meaning"], r
        if r["status"] == "removed":
            assert get_flag(r["name"]) is None
            continue
        f = get_flag(r["name"])
        assert f is not None and f.allowed == r["allowed"] and r["allowed"]
        assert f.accepts(r["default"]), r  # Paddle's own default is a valid value
        if r["value_type"] == "choice":
            assert f.choices == tuple(r["choices"].split("|")) and all(f.accepts(c) for c in f.choices)
            assert not f.accepts("no-such-choice")
        else:
            assert not r["choices"], r
        if r["value_type"] == "bool":
            assert all(f.accepts(v) for v in ("0", "1", "true", "False")) and not f.accepts("yes")
        if r["value_type"] in ("int", "float"):
            assert r["min_value"], r  # every number flag has a lower bound
            lo = float(r["min_value"])
            assert f.accepts(r["min_value"]) and not f.accepts("x")
            assert not f.accepts(str(int(lo) - 1))  # below the bound
            if r["max_value"]:
                assert float(r["max_value"]) > lo and not f.accepts(str(float(r["max_value"]) * 2 + 1))
