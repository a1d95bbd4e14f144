"""`paddlefit runs` (list, show, compare) on a real registry: the values in the tables and in `--json`, and exit 2
with a message naming the fix for an unknown id, `--last 0`, a corrupt or a newer database."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paddlefit.cli.main import app
from paddlefit.runs import SCHEMA_VERSION, Registry

ROOT = Path(__file__).resolve().parents[2]

COMPARISON = {
    "device": {"kind": "gpu", "name": "L4", "count": 1},
    "status": "predicted",
    "reason": None,
    "calibration": "published-fit",
    "warmup_steps": 5,
    "measured_steps": 300,
    "figures": [
        {
            "name": "step_time_s",
            "label": "step time (median)",
            "unit": "s",
            "predicted": 0.012,
            "measured": 0.015,
            "ratio": 0.8,
        },
        {
            "name": "step_time_p95_s",
            "label": "step time (p95)",
            "unit": "s",
            "predicted": None,
            "measured": 0.02,
            "ratio": None,
        },
        {
            "name": "samples_per_s",
            "label": "samples/s",
            "unit": "1/s",
            "predicted": 2666.0,
            "measured": 2133.0,
            "ratio": 1.25,
        },
        {
            "name": "peak_memory_bytes",
            "label": "peak allocated memory",
            "unit": "B",
            "predicted": 5.1e8,
            "measured": 4.0e8,
            "ratio": 1.27,
        },
        {"name": "mfu", "label": "MFU", "unit": "", "predicted": 0.3, "measured": 0.24, "ratio": 1.25},
        {
            "name": "data_wait_fraction",
            "label": "data wait",
            "unit": "",
            "predicted": None,
            "measured": 0.05,
            "ratio": None,
        },
    ],
}


def _fill(home: Path) -> None:
    """Run 1: resnet50 on one L4, finished, with the comparison document; run 2: the same model on 2 CPUs, AMP off,
    a bigger micro-batch, stopped."""
    reg, warnings = Registry(home / "runs.db"), []
    a = reg.start_run(
        {
            "run_dir": "/runs/l4",
            "model": "resnet50",
            "device_kind": "gpu",
            "device_name": "L4",
            "device_count": 1,
            "precision": "amp-o1",
            "micro_batch_size": 32,
            "grad_accum_steps": 2,
            "global_batch": 64,
            "spec_sha256": "aa11",
            "paddle_version": "3.3.1",
        },
        warnings.append,
    )
    reg.update_run(
        a,
        {
            "status": "finished",
            "steps": 300,
            "predicted_step_s": 0.012,
            "measured_step_s": 0.015,
            "measured_step_p95_s": 0.02,
            "predicted_samples_per_s": 2666.0,
            "measured_samples_per_s": 2133.0,
            "predicted_peak_bytes": 5.1e8,
            "measured_peak_bytes": 4.0e8,
            "predicted_mfu": 0.3,
            "measured_mfu": 0.24,
            "data_wait_fraction": 0.05,
            "final_loss": 0.4321,
            "eval_accuracy": 0.912,
            "comparison_json": COMPARISON,
        },
        warnings.append,
    )
    b = reg.start_run(
        {
            "run_dir": "/runs/cpu",
            "model": "resnet50",
            "device_kind": "cpu",
            "device_name": "cpu",
            "device_count": 2,
            "precision": "fp32",
            "micro_batch_size": 64,
            "grad_accum_steps": 2,
            "global_batch": 256,
            "spec_sha256": "bb22",
            "paddle_version": "3.3.1",
        },
        warnings.append,
    )
    reg.update_run(
        b,
        {"status": "stopped", "steps": 40, "measured_step_s": 1.5, "final_loss": 1.25, "reason": "SIGTERM"},
        warnings.append,
    )
    assert warnings == []


@pytest.fixture
def home(tmp_path: Path) -> Path:
    _fill(tmp_path)
    return tmp_path


def _run(home: Path, *args: str):
    """`paddlefit runs ARGS` at 200 columns. (Rich fixes a console's width from COLUMNS when it is created, at
    import; pytest-xdist's workers have COLUMNS=80, so the environment of the call alone does not widen it.)"""
    from paddlefit.cli import common

    before, common.out._width = common.out._width, 200
    try:
        return CliRunner().invoke(app, ["runs", *args], env={"PADDLEFIT_HOME": str(home), "COLUMNS": "200"})
    finally:
        common.out._width = before


def test_list_shows_the_values_and_filters(home):
    res = _run(home)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    row1 = next(line for line in lines if "/runs/l4" in line)
    row2 = next(line for line in lines if "/runs/cpu" in line)
    for cell in ("finished", "resnet50", "L4 x1", "amp-o1", "64", "300", "2,133.0", "0.80x", "0.4321", "91.2 %"):
        assert cell in row1, (cell, row1)
    for cell in ("stopped", "cpu x2", "fp32", "256", "40", "1.25"):
        assert cell in row2, (cell, row2)
    assert lines.index(row2) < lines.index(row1)  # newest first
    assert "/runs/cpu" not in _run(home, "--device", "L4").stdout
    assert "/runs/l4" not in _run(home, "--last", "1").stdout
    res = _run(home, "--model", "vit")
    assert res.exit_code == 0 and "no recorded run matches --model vit" in res.stdout


def test_list_json_is_every_field(home):
    res = _run(home, "--json", "--device", "gpu")
    assert res.exit_code == 0
    rows = json.loads(res.stdout)
    assert [r["id"] for r in rows] == [1] and rows[0]["measured_mfu"] == 0.24
    assert rows[0]["comparison_json"]["calibration"] == "published-fit"
    assert [r["id"] for r in json.loads(_run(home, "--json").stdout)] == [2, 1]


def test_show_renders_the_comparison_document(home):
    res = _run(home, "show", "1")
    assert res.exit_code == 0, res.output
    text = res.stdout
    for value in (
        "run 1",
        "/runs/l4",
        "aa11",
        "12.0 ms",
        "15.0 ms",
        "381.5 MiB",
        "24.0 %",
        "91.2 %",
        "predicted vs measured",
        "published-fit",
        "300 measured steps after 5 warm-up",
    ):
        assert value in text, value
    mem = next(line for line in text.splitlines() if "peak allocated memory" in line)
    assert "486.4 MiB" in mem and "381.5 MiB" in mem and "1.27x" in mem
    mfu = next(line for line in text.splitlines() if line.strip().startswith("MFU"))
    assert "30.0 %" in mfu and "24.0 %" in mfu and "1.25x" in mfu
    p95 = next(line for line in text.split("predicted vs measured")[-1].splitlines() if "step time (p95)" in line)
    assert "20.0 ms" in p95 and "-" in p95
    doc = json.loads(_run(home, "show", "1", "--json").stdout)
    assert doc["comparison_json"] == COMPARISON and doc["global_batch"] == 64
    assert "predicted vs measured" not in _run(home, "show", "2").stdout  # run 2 has no document


def test_compare_marks_the_differences(home):
    res = _run(home, "compare", "1", "2")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()

    def row(label: str) -> str:
        return next(line for line in lines if line.strip().startswith(label))

    assert "amp-o1" in row("precision") and "fp32" in row("precision") and "*" in row("precision")
    assert "*" not in row("model") and "*" not in row("accumulation steps") and "*" not in row("Paddle")
    assert "15.0 ms" in row("measured step time (median)") and "1.50 s" in row("measured step time (median)")
    assert "100.00x" in row("measured step time (median)")  # 1.5 / 0.015
    doc = json.loads(_run(home, "compare", "1", "2", "--json").stdout)
    assert doc["runs"] == [1, 2]
    differs = {i["field"] for i in doc["config"] + doc["figures"] if i["differs"]}
    assert {"device_name", "device_count", "precision", "micro_batch_size", "global_batch", "spec_sha256"} <= differs
    assert not {"model", "grad_accum_steps", "paddle_version"} & differs


def test_bad_input_exits_2_naming_the_fix(home):
    res = _run(home, "show", "9")
    assert res.exit_code == 2 and "run 9 is not in the run registry" in res.stderr and "`paddlefit runs`" in res.stderr
    res = _run(home, "compare", "1", "9")
    assert res.exit_code == 2 and "run 9" in res.stderr
    res = _run(home, "--last", "0")
    assert res.exit_code == 2 and "--last 0" in res.stderr and "at least 1" in res.stderr
    res = _run(home, "show", "9", "--json")
    assert res.exit_code == 2 and "run 9" in json.loads(res.stdout)["error"]["message"]


def test_empty_registry_is_a_friendly_line(tmp_path):
    res = _run(tmp_path)
    assert res.exit_code == 0 and "no runs recorded yet in" in res.stdout and "`paddlefit train`" in res.stdout
    assert str(tmp_path / "runs.db") in res.stdout.replace("\n", "")
    res = _run(tmp_path, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout) == []
    assert not (tmp_path / "runs.db").exists()


def _paddlefit(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PADDLEFIT_HOME": str(home), "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-c", "from paddlefit.cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_corrupt_registry_exits_2_without_a_traceback(tmp_path):
    (tmp_path / "runs.db").write_bytes(os.urandom(4096))
    for args in (("runs",), ("runs", "show", "1"), ("runs", "--json")):
        res = _paddlefit(tmp_path, *args)
        assert res.returncode == 2, (args, res.stderr)
        assert "Traceback" not in res.stderr and "error:" in res.stderr
        assert "cannot be read" in res.stderr and "move it aside" in res.stderr and "runs.db" in res.stderr


def test_newer_registry_exits_2(home):
    with sqlite3.connect(home / "runs.db") as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    res = _run(home)
    assert res.exit_code == 2 and "newer paddlefit" in res.stderr and "upgrade paddlefit" in res.stderr


def test_ids_and_counts_beyond_sqlites_integers_are_bad_input_not_a_crash(tmp_path: Path) -> None:
    from paddlefit.runs.registry import Registry, RegistryError

    reg = Registry(tmp_path / "runs.db")
    rid = reg.start_run({"model": "m", "run_dir": str(tmp_path)}, warn=lambda msg: None)
    with pytest.raises(RegistryError, match="run 99999999999999999999 is not in the run registry"):
        reg.get_run(99999999999999999999)
    assert [r["id"] for r in reg.list_runs(last=10**30)] == [rid]  # more than there are: all of them


def test_a_model_matches_by_its_whole_string_or_its_name_after_the_module(tmp_path: Path) -> None:
    from paddlefit.runs.registry import Registry

    reg = Registry(tmp_path / "runs.db")
    ids = {
        m: reg.start_run({"model": m}, warn=lambda msg: None)
        for m in ("paddlefit.models.examples:digits_cnn", "resnet50", "my.pkg.digits_cnn", "digitsXcnn_v2")
    }
    got = lambda m: sorted(r["model"] for r in reg.list_runs(model=m))  # noqa: E731
    assert got("DIGITS_CNN") == ["my.pkg.digits_cnn", "paddlefit.models.examples:digits_cnn"]
    assert got("paddlefit.models.examples:digits_cnn") == ["paddlefit.models.examples:digits_cnn"]
    assert got("digits%") == [] and got("digits_cn") == []  # no wildcards, no prefixes
    assert got("resnet50") == ["resnet50"] and len(ids) == 4


def test_a_paddlefit_home_that_is_a_file_is_named_not_an_empty_registry(tmp_path: Path) -> None:
    from paddlefit.runs.registry import Registry, RegistryError

    home = tmp_path / "afile"
    home.write_text("x")
    reg = Registry(home / "runs.db")
    with pytest.raises(RegistryError, match=r"afile is a file, not a directory\. Fix: set PADDLEFIT_HOME"):
        reg.list_runs()
    warnings: list[str] = []
    assert reg.start_run({"model": "m"}, warn=warnings.append) is None
    assert len(warnings) == 1 and "afile is a file, not a directory: set PADDLEFIT_HOME to a directory" in warnings[0]


def test_list_here_keeps_the_runs_under_this_directory_and_the_table_fits(tmp_path, monkeypatch):
    """The registry lists every run of the user on the machine, no way to see this project's; the table
    was ~210 columns wide. `--here` keeps the runs whose run directory is under the current directory; the table
    fits the terminal (columns dropped, widest last) and `--wide` shows them all."""
    reg, said = Registry(tmp_path / "runs.db"), []
    proj = tmp_path / "proj"
    for run_dir in (proj / "runs" / "a", tmp_path / "other" / "b", proj / "runs" / "c"):
        reg.start_run(
            {
                "run_dir": str(run_dir),
                "model": "paddlefit.models.examples:digits_cnn",
                "device_kind": "cpu",
                "device_name": "cpu",
                "device_count": 1,
                "precision": "fp32",
                "micro_batch_size": 32,
                "grad_accum_steps": 1,
                "global_batch": 32,
            },
            said.append,
        )
    (proj / "runs").mkdir(parents=True)
    monkeypatch.chdir(proj)
    env = {"PADDLEFIT_HOME": str(tmp_path), "COLUMNS": "100"}
    res = CliRunner().invoke(app, ["runs", "--here", "--json"], env=env)
    assert res.exit_code == 0, res.output
    assert [r["run_dir"] for r in json.loads(res.stdout)] == [str(proj / "runs" / "c"), str(proj / "runs" / "a")]
    assert [
        r["id"]
        for r in json.loads(CliRunner().invoke(app, ["runs", "--here", "--last", "1", "--json"], env=env).stdout)
    ] == [3]
    text = CliRunner().invoke(app, ["runs"], env=env).stdout
    assert all(len(line) <= 100 for line in text.splitlines()), text
    assert "--wide" in text and str(tmp_path / "other" / "b") in "".join(text.split())  # folded, not cut
    wide = CliRunner().invoke(app, ["runs", "--wide"], env=env).stdout
    assert "precision" in wide and "global batch" in wide and "--wide" not in wide


HOSTILE = "\x1b[2J\x1b]0;pwned\x07\r\x9b31m\u202e"  # clear screen, set title, carriage return, C1 CSI, RTL override


def test_control_characters_in_names_and_paths_are_shown_escaped(tmp_path: Path) -> None:
    """A run directory or model named with `\\e[2J` cleared the screen through `runs`: every table shows
    names and paths from the registry with control characters escaped, as `\\x1b`."""
    reg, warnings = Registry(tmp_path / "runs.db"), []
    a = reg.start_run(
        {
            "run_dir": f"/runs/a{HOSTILE}",
            "model": f"m{HOSTILE}",
            "device_kind": "cpu",
            "device_name": f"cpu{HOSTILE}",
            "device_count": 1,
            "precision": "fp32",
        },
        warnings.append,
    )
    reg.update_run(
        a,
        {"status": "failed", "reason": f"boom{HOSTILE}", "comparison_json": {**COMPARISON, "reason": HOSTILE}},
        warnings.append,
    )
    b = reg.start_run(
        {
            "run_dir": "/runs/b",
            "model": "m",
            "device_kind": "cpu",
            "device_name": "cpu",
            "device_count": 1,
            "precision": f"fp32{HOSTILE}",
        },
        warnings.append,
    )
    for args in ([], ["show", str(a)], ["compare", str(a), str(b)]):
        res = _run(tmp_path, *args)
        assert res.exit_code == 0, res.output
        assert not any(ch in res.output for ch in "\x1b\x07\r\x9b\u202e"), (args, repr(res.output))
    assert "/runs/a\\x1b[2J\\x1b]0;pwned\\x07\\r\\x9b31m\\u202e" in _run(tmp_path).output


def test_show_and_list_say_what_each_figure_is(home):
    """`runs show` printed registry keys (`predicted_step_s 43.1 ms`, `measured_peak_bytes
    1.5 MiB`, `device_kind`, `spec_sha256`) whose `_s`/`_bytes` contradict the ms/MiB beside them, and the list's
    `samples/s` did not say it is the steps after warm-up (train's summary counts the whole run)."""
    text = _run(home, "show", "1").stdout
    for key in ("predicted_step_s", "measured_peak_bytes", "device_kind", "spec_sha256", "data_wait_fraction"):
        assert key not in text, key
    rows = {
        " ".join(line.split()[:-1]): line.split()[-1]
        for line in text.split("predicted vs measured")[0].splitlines()
        if len(line.split()) > 1
    }
    assert rows["predicted step time 12.0"] == "ms" and rows["measured peak memory 381.5"] == "MiB"
    assert rows["device kind"] == "gpu" and rows["job spec SHA-256"] == "aa11"
    assert rows["measured samples/s (after warm-up)"] == "2,133.0" and rows["data wait (after warm-up) 5.0"] == "%"
    assert set(json.loads(_run(home, "show", "1", "--json").stdout)) >= {"predicted_step_s", "spec_sha256"}
    listing = _run(home, "--wide").stdout
    assert "(after warm-up)" in listing and "2,133.0" in listing


@pytest.mark.parametrize("disk", ["read-only", "full"])
def test_runs_reads_a_healthy_registry_on_a_read_only_or_full_disk(tmp_path: Path, disk: str) -> None:
    """With PADDLEFIT_HOME on a read-only mount or a full tmpfs, the read-only
    `paddlefit runs` exited 2 "cannot be read (disk I/O error) ... move it aside if it is damaged" (SQLite opened the
    file read-write and could not make its WAL index). Reads now open it read-only and list the runs."""
    probe = tmp_path / "probe"
    probe.mkdir()
    if subprocess.run(["unshare", "-rm", "mount", "-t", "tmpfs", "tmpfs", str(probe)]).returncode != 0:
        pytest.skip("cannot mount here (no user namespaces)")
    home, saved = tmp_path / "home", tmp_path / "saved"
    _fill(saved)
    home.mkdir()
    cmd = f"{sys.executable} -m paddlefit.cli.main runs --json"
    if disk == "read-only":
        body = f"cp -a {saved}/. {home} && mount --bind {home} {home} && mount -o remount,bind,ro {home} && {cmd}"
    else:
        body = (
            f"mount -t tmpfs -o size=256k tmpfs {home} && cp -a {saved}/. {home} && "
            f"(dd if=/dev/zero of={home}/filler bs=4k 2>/dev/null; true) && {cmd}"
        )
    env = {**os.environ, "PADDLEFIT_HOME": str(home), "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run(["unshare", "-rm", "sh", "-c", body], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [(row["id"], row["run_dir"], row["status"]) for row in json.loads(r.stdout)] == [
        (2, "/runs/cpu", "stopped"),
        (1, "/runs/l4", "finished"),
    ]
