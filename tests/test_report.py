"""paddlefit report: the HTML page of real run directories (trained here on the digits example, one of them
resumed), its numbers against summary.json, its plots in headless Chromium, and the CLI."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from paddlefit.report.html import build_report, fmt_num, plot_ids, render_html
from test_train import run, train_cmd, write_spec

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
COMPARISON = {
    "device": {"kind": "cpu", "name": "this CPU", "count": 1}, "status": "predicted", "reason": None,
    "calibration": "published-fit",
    "figures": [
        {"name": "step_time_s", "label": "step time (median)", "unit": "s", "predicted": 0.012, "measured": 0.015,
         "ratio": 0.8},
        {"name": "step_time_p95_s", "label": "step time (p95)", "unit": "s", "predicted": None, "measured": 0.02,
         "ratio": None},
        {"name": "samples_per_s", "label": "samples/s <fast>", "unit": "1/s", "predicted": 2666.0,
         "measured": 2133.0, "ratio": 1.25}],
    "warmup_steps": 5, "measured_steps": 300,
}  # fmt: skip


def cli(*args: str) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "paddlefit.cli.main", "report", *args], timeout=120)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``plain``: 30 steps, checkpoints every 10; ``resumed``: the same run continued to 50 steps by a second
    ``train --resume auto`` (a resume at step 30), with comparison.json and a real ``profile --json``."""
    tmp = tmp_path_factory.mktemp("report")
    spec = write_spec(tmp / "job.yaml", batch_size=16, max_steps=30, seed=0,
                      data={"train_args": {"split": "train", "test_fraction": 0.9}, "eval": "digits",
                            "eval_args": {"split": "test", "test_fraction": 0.9}, "eval_batch_size": 512},
                      checkpoint={"every_steps": 10, "keep_last": 10})  # fmt: skip
    resumed = tmp / "resumed"
    r = run(train_cmd(spec, resumed, "--resume", "never"))
    assert r.returncode == 0, r.stderr
    shutil.copytree(resumed, tmp / "plain")
    r = run(train_cmd(spec, resumed, "--resume", "auto", "--max-steps", "50"))
    assert r.returncode == 0, r.stderr
    (resumed / "comparison.json").write_text(json.dumps(COMPARISON))
    r = run([sys.executable, "-m", "paddlefit.cli.main", "profile", str(spec), "--steps", "3", "--warmup", "1",
             "--json"], timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    (resumed / "profile.json").write_text(r.stdout)
    return {"plain": tmp / "plain", "resumed": resumed, "spec": spec}


class Cells(HTMLParser):
    """Collects, per element id and per ``data-key``, the text and ``data-value`` of the element."""

    def __init__(self) -> None:
        super().__init__()
        self.by_key: dict[str, tuple[str, str | None]] = {}
        self.by_id: dict[str, str] = {}
        self.stack: list[tuple[str | None, str | None, str | None, list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("td", "span", "p", "pre"):
            self.stack.append((a.get("data-key"), a.get("id"), a.get("data-value"), []))

    def handle_data(self, data: str) -> None:
        for entry in self.stack:
            entry[3].append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "span", "p", "pre") and self.stack:
            key, elem_id, value, text = self.stack.pop()
            if key:
                self.by_key[key] = ("".join(text), value)
            if elem_id:
                self.by_id[elem_id] = "".join(text)


def parse(page: str) -> Cells:
    cells = Cells()
    cells.feed(page)
    return cells


def test_number_rule() -> None:
    assert [fmt_num(v) for v in (None, True, 0, 20160, 2474.440699, 0.008805816, 1581032.0, float("nan"), 1e-7)] == [
        "-", "true", "0", "20,160", "2474", "0.008806", "1.581e+06", "-", "1e-07"]  # fmt: skip


def test_page_numbers_are_summary_json_and_every_plot_has_an_svg(runs: dict[str, Path]) -> None:
    for name in ("plain", "resumed"):
        data = build_report(runs[name])
        page = render_html(data)
        summary = json.loads((runs[name] / "summary.json").read_text())
        cells = parse(page)
        for key in ("steps", "final_loss", "eval_loss", "eval_accuracy", "samples_per_s", "peak_memory_bytes",
                    "data_wait_fraction", "wall_seconds", "samples"):  # fmt: skip
            text, value = cells.by_key[key]
            assert text == fmt_num(summary[key]), key
            assert json.loads(value) == summary[key], key
        assert data.status == "finished" and data.steps == summary["steps"] == (30 if name == "plain" else 50)
        assert "finished" in cells.by_id["run-status"]
        assert cells.by_id["run-steps"].startswith(fmt_num(summary["steps"]))
        figures = re.findall(r'<figure class="plot" id="(plot-[\w-]+)">(.*?)</figure>', page, flags=re.S)
        assert [f for f, _ in figures] == plot_ids(page)
        assert all("<svg" in body and "</svg>" in body for _, body in figures)
        expected = ["plot-loss", "plot-throughput"] + (["plot-profile"] if name == "resumed" else [])
        assert plot_ids(page) == expected
        assert "plot-memory-absent" in cells.by_id  # a CPU run: no per-step memory, the run's peak instead
        assert fmt_num(summary["peak_memory_bytes"]) in cells.by_id["plot-memory-absent"]
        assert not re.search(r'(src|href)="(?!#)|<script|<link|@import|url\((?!#)', page), "external resource"
        assert (name == "plain") == ("profile-absent" in cells.by_id)
        assert (name == "plain") == ("comparison-absent" in cells.by_id)


def test_the_resume_is_found_and_the_comparison_shown(runs: dict[str, Path]) -> None:
    plain, resumed = build_report(runs["plain"]), build_report(runs["resumed"])
    assert plain.resumes == []
    assert [r.step for r in resumed.resumes] == [30] and resumed.resumes[0].from_checkpoint == "step-00000030"
    assert resumed.resumes[0].downtime_s > 0.5
    assert [c.step for c in resumed.checkpoints] == [10, 20, 30, 40, 50]
    page = render_html(resumed)
    assert 'id="resumes"' in page and "resumes (steps 30)" in page
    rows = dict(re.findall(r'<tr data-figure="(\w+)">(.*?)</tr>', page))
    assert set(rows) == {"step_time_s", "step_time_p95_s", "samples_per_s"}
    assert "samples/s &lt;fast&gt;" in rows["samples_per_s"] and 'data-value="1.25"' in rows["samples_per_s"]
    assert "<td class=\"num\">-</td>" in rows["step_time_p95_s"]
    c = json.loads((runs["resumed"] / "comparison.json").read_text())
    c.update(status="not predicted", reason="no calibration for <this> device", figures=[])
    (runs["resumed"] / "comparison.json").write_text(json.dumps(c))
    try:
        assert "not predicted: no calibration for &lt;this&gt; device" in render_html(build_report(runs["resumed"]))
    finally:
        (runs["resumed"] / "comparison.json").write_text(json.dumps(COMPARISON))


def test_a_killed_and_a_running_run_are_reported(runs: dict[str, Path], tmp_path: Path) -> None:
    """A run killed mid-write (cut last metrics line, no status.json or summary.json, its lock record left
    behind) and one whose writer is alive; plus per-step GPU memory gives the memory plot."""
    run_dir = tmp_path / "killed"
    shutil.copytree(runs["plain"], run_dir)
    (run_dir / "status.json").unlink()
    (run_dir / "summary.json").unlink()
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    for r in recs:
        if "loss" in r:
            r["peak_memory_bytes"] = 1000 * r["step"]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs) + '{"step": 31, "ep')
    dead = subprocess.Popen(["true"])
    dead.wait()
    record = {"pid": dead.pid, "host": os.uname().nodename, "since": "2099-01-01T00:00:00+0000", "command": "train"}
    (run_dir / ".lock.json").write_text(json.dumps(record))
    data = build_report(run_dir)
    assert data.status == "killed" and data.steps == 30 and data.summary is None
    assert any("do not parse" in n for n in data.notes)
    assert [r.step for r in data.resumes] == [30]  # the recorded writer started after the last checkpoint
    page = render_html(data)
    assert plot_ids(page) == ["plot-loss", "plot-throughput", "plot-memory"]
    assert 'id="summary-absent"' in page
    (run_dir / ".lock.json").write_text(json.dumps({**record, "pid": os.getpid()}))
    assert build_report(run_dir).status == "running"


def test_cli_writes_out_prints_json_and_refuses_a_non_run_dir(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    r = cli(str(runs["resumed"]), "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc == {"out": str(out), "plots": ["plot-loss", "plot-throughput", "plot-profile"], "status": "finished"}
    assert out.read_text().startswith("<!DOCTYPE html>")
    r = cli(str(runs["plain"]))
    assert r.returncode == 0 and r.stdout.strip() == str(runs["plain"] / "report.html")
    assert (runs["plain"] / "report.html").is_file()
    r = cli(str(tmp_path))
    assert r.returncode == 2 and "RUN_DIR" in r.stderr and "not a run directory" in r.stderr
    assert "--run-dir of a `paddlefit train` run" in r.stderr
    r = cli("--help")
    assert r.returncode == 0 and "Examples:" in r.stdout


def test_the_page_renders_in_headless_chromium(runs: dict[str, Path], tmp_path: Path) -> None:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip("needs Debian's chromium and chromedriver: apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    path = tmp_path / "report.html"
    path.write_text(render_html(build_report(runs["resumed"])), encoding="utf-8")
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    profile = tempfile.mkdtemp(dir=tmp_path)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={profile}", "--window-size=1200,900"):  # fmt: skip
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    try:
        driver.get("file://" + str(path))
        assert driver.title == "paddlefit report: resumed"
        figures = driver.find_elements(By.CSS_SELECTOR, "figure.plot")
        assert [f.get_attribute("id") for f in figures] == ["plot-loss", "plot-throughput", "plot-profile"]
        for fig in figures:
            svg = fig.find_element(By.TAG_NAME, "svg")
            assert svg.size["width"] > 100 and svg.size["height"] > 50, (fig.get_attribute("id"), svg.size)
        severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        assert severe == []
    finally:
        driver.quit()
