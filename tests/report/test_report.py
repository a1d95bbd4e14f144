"""paddlefit report: the HTML page of real run directories (trained here on the digits example, one of them
resumed), its numbers against summary.json, its plots in headless Chromium, and the CLI."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from trainrun import ENV, SharedRun, run, train_cmd, wait_for_step, write_spec

from paddlefit.report.html import build_report, fmt_num, plot_ids, render_html
from paddlefit.report.reading import find_time_resumes
from paddlefit.runs.registry import Registry
from paddlefit.runs.view import comparison_unit, fmt, fmt_ratio

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
COMPARISON = {
    "device": {"kind": "cpu", "name": "this CPU", "count": 1},
    "status": "predicted",
    "reason": None,
    "calibration": "published-fit",
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
            "label": "samples/s <fast>",
            "unit": "1/s",
            "predicted": 2666.0,
            "measured": 2133.0,
            "ratio": 1.25,
        },
    ],
    "warmup_steps": 5,
    "measured_steps": 300,
}


def cli(*args: str) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "paddlefit.cli.main", "report", *args], timeout=120)


def _train_runs(tmp: Path) -> None:
    spec = write_spec(
        tmp / "job.yaml",
        batch_size=16,
        max_steps=30,
        seed=0,
        data={
            "train_args": {"split": "train", "test_fraction": 0.9},
            "eval": "digits",
            "eval_args": {"split": "test", "test_fraction": 0.9},
            "eval_batch_size": 512,
        },
        checkpoint={"every_steps": 10, "keep_last": 10},
    )
    resumed = tmp / "resumed"
    predict_env = {k: v for k, v in ENV.items() if k != "PADDLEFIT_NO_PREDICT"}
    r = run(train_cmd(spec, resumed, "--resume", "never"), env=predict_env)
    assert r.returncode == 0, r.stderr
    shutil.copytree(resumed, tmp / "plain")
    r = run(train_cmd(spec, resumed, "--resume", "auto", "--max-steps", "50"))
    assert r.returncode == 0, r.stderr
    r = run(
        [sys.executable, "-m", "paddlefit.cli.main", "profile", str(spec), "--steps", "3", "--warmup", "1", "--json"],
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    (resumed / "profile.json").write_text(r.stdout)


@pytest.fixture(scope="module")
def runs(shared_dir) -> dict[str, Path]:
    """``plain``: 30 steps, checkpoints every 10, with train's real prediction (PADDLEFIT_NO_PREDICT unset: one
    planner child, ~5 s); ``resumed``: the same run continued to 50 steps by a second ``train --resume auto`` (a
    resume at step 30), with a real ``profile --json``. Both comparison.json files are the trainer's own. Trained
    once per session (``shared_dir``); a test that changes one copies it."""
    tmp = shared_dir("report-runs", _train_runs)
    return {"plain": tmp / "plain", "resumed": tmp / "resumed", "spec": tmp / "job.yaml"}


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
        "-",
        "true",
        "0",
        "20,160",
        "2474",
        "0.008806",
        "1.581e+06",
        "-",
        "1e-07",
    ]


def test_page_numbers_are_summary_json_and_every_plot_has_an_svg(runs: dict[str, Path]) -> None:
    for name in ("plain", "resumed"):
        data = build_report(runs[name])
        page = render_html(data)
        summary = json.loads((runs[name] / "summary.json").read_text())
        cells = parse(page)
        for key in (
            "steps",
            "final_loss",
            "eval_loss",
            "eval_accuracy",
            "samples_per_s",
            "peak_memory_bytes",
            "data_wait_fraction",
            "wall_seconds",
            "samples",
        ):
            text, value = cells.by_key[key]
            as_terminal = fmt(summary[key], "1/s") if key == "samples_per_s" else None  # as `train` prints it
            assert text == (as_terminal or fmt_num(summary[key])), key
            assert json.loads(value) == summary[key], key
        assert data.status == "finished" and data.steps == summary["steps"] == (30 if name == "plain" else 50)
        assert "finished" in cells.by_id["run-status"]
        assert cells.by_id["run-steps"].startswith(fmt_num(summary["steps"]))
        figures = re.findall(r'<figure class="plot" id="(plot-[\w-]+)">(.*?)</figure>', page, flags=re.S)
        assert [f for f, _ in figures] == plot_ids(page)
        assert all("<svg" in body and "</svg>" in body for _, body in figures)
        expected = ["plot-loss", "plot-throughput", "plot-time"] + (["plot-profile"] if name == "resumed" else [])
        assert plot_ids(page) == expected
        assert "plot-memory-absent" in cells.by_id  # a CPU run: no per-step memory, the run's peak instead
        assert fmt_num(summary["peak_memory_bytes"]) in cells.by_id["plot-memory-absent"]
        assert not re.search(r'(src|href)="(?!#)|<script|<link|@import|url\((?!#)', page), "external resource"
        assert (name == "plain") == ("profile-absent" in cells.by_id)
        assert_comparison_shown(runs[name], page)


def assert_comparison_shown(run_dir: Path, page: str) -> None:
    """The trainer's own comparison.json on the page: one row per figure, each predicted/measured/ratio cell its
    number (text and exact ``data-value``); at the end of a finished run summary.json["comparison"] is the same."""
    comparison = json.loads((run_dir / "comparison.json").read_text())
    assert comparison == json.loads((run_dir / "summary.json").read_text())["comparison"]
    assert comparison["measured_steps"] > 0 and "comparison-absent" not in page
    rows = dict(re.findall(r'<tr data-figure="(\w+)">(.*?)</tr>', page))
    assert list(rows) == [f["name"] for f in comparison["figures"]] and "samples_per_s" in rows
    for fig in comparison["figures"]:
        cells = re.findall(r'<td class="num"(?: data-value="([^"]*)")?>([^<]*)</td>', rows[fig["name"]])
        assert len(cells) == 3, rows[fig["name"]]
        unit = comparison_unit(fig)  # the rule `train` and `runs show` print with: ms, MiB, %
        shown = (fmt(fig["predicted"], unit), fmt(fig["measured"], unit), fmt_ratio(fig["ratio"]))
        for (value, text), expect, want in zip(
            cells, (fig["predicted"], fig["measured"], fig["ratio"]), shown, strict=True
        ):
            assert text == want, fig
            assert (json.loads(value) if value else None) == expect, fig
    step = comparison["figures"][0]
    assert step["name"] == "step_time_s" and fmt(step["measured"], "s").endswith(" ms")
    assert f'<p id="comparison-status">{comparison["status"]}' in page


def test_the_resume_is_found_and_the_comparison_shown(runs: dict[str, Path], tmp_path: Path) -> None:
    plain, resumed = build_report(runs["plain"]), build_report(runs["resumed"])
    assert plain.resumes == []
    assert [r.step for r in resumed.resumes] == [30] and resumed.resumes[0].from_checkpoint == "step-00000030"
    assert resumed.resumes[0].downtime_s > 0.5
    assert [c.step for c in resumed.checkpoints] == [10, 20, 30, 40, 50]
    page = render_html(resumed)
    assert 'id="resumes"' in page and "resumes (steps 30)" in page
    # train's real prediction (the planner ran for the first run): the predicted column has numbers
    real = json.loads((runs["plain"] / "comparison.json").read_text())
    assert real["status"] == "predicted"
    assert any(isinstance(f["predicted"], int | float) for f in real["figures"])
    # a hand-written comparison: escaping and the `-` of a figure with no prediction
    run_dir = tmp_path / "copy"
    shutil.copytree(runs["resumed"], run_dir)
    breakdown = {
        "conv": {"seconds": 0.004, "bound": "compute", "kernels": 12},
        "optimizer": {"seconds": 0.0015, "bound": "memory", "kernels": 3},
    }
    (run_dir / "comparison.json").write_text(json.dumps({**COMPARISON, "time_breakdown": breakdown}))
    page = render_html(build_report(run_dir))
    ops = re.findall(r'<tr data-op-class="(\w+)"><td>\w+</td><td class="num" data-value="([\d.e-]+)"', page)
    assert ops == [("conv", "0.004"), ("optimizer", "0.0015")]  # slowest first, the document's seconds
    rows = dict(re.findall(r'<tr data-figure="(\w+)">(.*?)</tr>', page))
    assert set(rows) == {"step_time_s", "step_time_p95_s", "samples_per_s"}
    assert "samples/s &lt;fast&gt;" in rows["samples_per_s"] and 'data-value="1.25"' in rows["samples_per_s"]
    assert '<td class="num">-</td>' in rows["step_time_p95_s"]
    c = {**COMPARISON, "status": "not predicted", "reason": "no calibration for <this> device", "figures": []}
    (run_dir / "comparison.json").write_text(json.dumps(c))
    assert "not predicted: no calibration for &lt;this&gt; device" in render_html(build_report(run_dir))
    (run_dir / "comparison.json").unlink()  # summary.json["comparison"] is the fallback
    data = build_report(run_dir)
    assert data.comparison == json.loads((run_dir / "summary.json").read_text())["comparison"]
    assert data.comparison_source == 'summary.json["comparison"]'


def test_metrics_without_times_fall_back_to_the_checkpoints(runs: dict[str, Path], tmp_path: Path) -> None:
    """metrics.jsonl of an older paddlefit (no ``time``, no resume record): no plot over time, the resume still
    found from the checkpoint manifests."""
    run_dir = tmp_path / "old"
    shutil.copytree(runs["resumed"], run_dir)
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "time"}) + "\n" for r in recs if "event" not in r)
    )
    data = build_report(run_dir)
    assert [r.step for r in data.resumes] == [30] and data.resumes[0].gap_unix is None
    assert "wall clock" in data.resumes[0].evidence
    page = render_html(data)
    assert "plot-time" not in plot_ids(page) and 'id="plot-time-absent"' in page


def test_resumes_from_metrics_times() -> None:
    """A gap longer than max(10 x the median step time, 5 s) between consecutive lines is a resume at the
    earlier line's step; a slow (8 s) eval between two steps is not: the gap before an eval line is its time."""
    train = [{"step": s, "loss": 1.0, "step_time_s": 0.1, "time": 100.0 + 0.1 * s} for s in range(1, 21)]
    for r in train[10:]:
        r["time"] += 30.0  # down after step 10
    train[15]["time"] += 4.0  # a 4 s hiccup: under 5 s
    evals = [{"step": 20, "eval_loss": 1.0, "time": train[-1]["time"] + 8.0}]
    train.append({"step": 21, "loss": 1.0, "step_time_s": 0.1, "time": evals[0]["time"] + 0.1})
    (r,) = find_time_resumes(train, evals)
    assert r.step == 10 and r.from_checkpoint == "step-00000010" and abs(r.downtime_s - 30.0) < 1e-6
    assert r.gap_unix == (train[9]["time"], train[10]["time"])
    assert find_time_resumes([{**x, "step_time_s": 4.0} for x in train], evals) == []  # 10 x 4 s = 40 s > 30 s
    assert find_time_resumes([{k: v for k, v in x.items() if k != "time"} for x in train], evals) == []


@pytest.mark.slow
def test_a_sigkilled_run_resumed_shows_its_down_time(tmp_path: Path) -> None:
    """SIGKILL mid-run, 6 s down, ``--resume auto``: the report has the resume at the checkpoint it continued from
    (as the run registry counts it), down >= 5 s, and the plot over time with the gap."""
    spec = write_spec(
        tmp_path / "job.yaml", batch_size=16, max_steps=150, seed=0, checkpoint={"every_steps": 20, "keep_last": 30}
    )
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        train_cmd(spec, run_dir, "--max-steps", "150"),
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_step(run_dir, 70, proc)  # mid-interval: after the checkpoint of step 60
    finally:
        proc.kill()
        proc.communicate()
    kept = sorted(int(p.name[5:]) for p in (run_dir / "checkpoints").glob("step-*") if (p / "manifest.json").is_file())
    before = []
    for x in (run_dir / "metrics.jsonl").read_text().splitlines():
        with contextlib.suppress(ValueError):  # the last line, cut by the kill
            before.append(json.loads(x))
    logged = [x for x in before if "loss" in x and x["step"] > kept[-1]]  # lost: after the kept checkpoint
    time.sleep(6)
    r = run(train_cmd(spec, run_dir, "--resume", "auto", "--max-steps", "150"))
    assert r.returncode == 0, r.stderr
    data = build_report(run_dir)
    assert data.status == "finished" and data.steps == 150
    resumed_at = kept[-1]
    assert resumed_at >= 60
    (res,) = data.resumes
    assert res.step == resumed_at and res.from_checkpoint == f"step-{resumed_at:08d}"
    assert res.downtime_s >= 6.0 and res.gap_unix is not None and "metrics.jsonl" in res.evidence
    # The steps lost and run again, and the compute they cost (their measured step times)
    lost = (resumed_at + 1, max(x["step"] for x in logged)) if logged else None  # None: killed at a checkpoint
    assert res.lost_steps == lost and (lost is None or lost[0] == resumed_at + 1 == logged[0]["step"])
    assert res.lost_compute_s is not None and abs(res.lost_compute_s - sum(x["step_time_s"] for x in logged)) < 1e-3
    if lost is None:
        said = "no step lost"
    else:
        steps = f"step {lost[0]}" if lost[0] == lost[1] else f"steps {lost[0]}-{lost[1]} ({lost[1] - lost[0] + 1})"
        said = f"{steps} lost and run again, {res.lost_compute_s:,.1f} s of compute"
    line = f"resumed at step {resumed_at} (from step-{resumed_at:08d}): down {res.downtime_s:,.1f} s; {said}"
    r = cli(str(run_dir), "--out", str(tmp_path / "r.html"))
    assert r.returncode == 0 and line in r.stdout.replace("\n", " ").replace("  ", " "), r.stdout
    registry = Registry()
    assert registry.get_run(registry.find_latest_for_run_dir(run_dir))["resumes"] == 1
    show = run(
        [sys.executable, "-m", "paddlefit.cli.main", "runs", "show", str(registry.find_latest_for_run_dir(run_dir))],
        env={**ENV, "COLUMNS": "250"},
    )
    assert show.returncode == 0 and line in show.stdout.replace("\n", " "), show.stdout[-2000:]
    page = render_html(data)
    assert plot_ids(page) == ["plot-loss", "plot-throughput", "plot-time"]
    time_svg = re.search(r'<figure class="plot" id="plot-time">(.*?)</figure>', page, flags=re.S).group(1)
    assert f"down {res.downtime_s:.0f} s" in time_svg
    row = re.search(r'<table id="resumes">.*?</table>', page, flags=re.S).group(0)
    assert f'data-value="{resumed_at}"' in row and f'data-value="{json.dumps(res.downtime_s)}"' in row
    assert said in row
    assert_comparison_shown(run_dir, page)


def test_the_environment_is_the_snapshot_train_wrote(runs: dict[str, Path]) -> None:
    snap = json.loads((runs["plain"] / "snapshot.json").read_text())
    assert {"os", "python", "paddle_version", "cpu_cores", "memory_total_bytes", "gpus", "env"} <= set(snap)
    data = build_report(runs["plain"])
    assert data.snapshot == snap and data.snapshot_source == "snapshot.json"
    page = render_html(data)
    cells = parse(page).by_key
    assert cells["snapshot.os"][0] == snap["os"] and cells["snapshot.python"][0] == snap["python"]
    assert cells["snapshot.paddle_version"][0] == snap["paddle_version"]
    assert json.loads(cells["snapshot.cpu_cores"][1]) == snap["cpu_cores"]
    assert json.loads(cells["snapshot.memory_total_bytes"][1]) == snap["memory_total_bytes"]
    assert cells["snapshot.memory_total_bytes"][0] == fmt_num(snap["memory_total_bytes"])
    assert json.loads(cells["snapshot.gpus"][1]) == len(snap["gpus"])
    assert cells["snapshot.in_container"][0] == {True: "yes", False: "no", None: "-"}[snap["in_container"]]
    for k, v in snap["env"].items():
        assert cells[f"snapshot.env.{k}"][0] == v
    assert json.loads(cells["snapshot.paddle_flags"][1]) == len(snap["paddle_flags"])  # counted, not listed
    assert all(f not in page for f in snap["paddle_flags"] if f not in snap["env"])
    assert 'id="environment-absent"' not in page


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
    assert data.status == "lost" and data.steps == 30 and data.summary is None  # `runs`' word for it
    assert any("do not parse" in n for n in data.notes)
    assert [r.step for r in data.resumes] == [30]  # the recorded writer started after the last checkpoint
    page = render_html(data)
    assert plot_ids(page) == ["plot-loss", "plot-throughput", "plot-time", "plot-memory"]
    assert 'id="summary-absent"' in page
    (run_dir / ".lock.json").write_text(json.dumps({**record, "pid": os.getpid()}))
    assert build_report(run_dir).status == "running"


def test_cli_writes_out_prints_json_and_refuses_a_non_run_dir(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    r = cli(str(runs["resumed"]), "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (resume,) = doc.pop("resumes")  # the finished run resumed at its last checkpoint: nothing lost
    assert re.fullmatch(r"resumed at step 30 \(from step-00000030\): down [\d.]+ s; no step lost", resume), resume
    assert doc == {
        "out": str(out),
        "plots": ["plot-loss", "plot-throughput", "plot-time", "plot-profile"],
        "status": "finished",
    }
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
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--window-size=1200,900",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    try:
        driver.get("file://" + str(path))
        assert driver.title == "paddlefit report: resumed"
        figures = driver.find_elements(By.CSS_SELECTOR, "figure.plot")
        assert [f.get_attribute("id") for f in figures] == ["plot-loss", "plot-throughput", "plot-time", "plot-profile"]
        for fig in figures:
            svg = fig.find_element(By.TAG_NAME, "svg")
            assert svg.size["width"] > 100 and svg.size["height"] > 50, (fig.get_attribute("id"), svg.size)
        severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        assert severe == []
    finally:
        driver.quit()


def test_summary_and_environment_read_like_the_terminal(tmp_path: Path) -> None:
    """The summary showed raw keys (`peak_memory_bytes`); the environment listed `OMP_NUM_THREADS 1` while
    plan said 2 Paddle threads, with nothing saying which the run used."""
    from paddlefit.report.reading import ReportData

    summary = {
        "steps": 630,
        "eval_accuracy": 0.9866,
        "samples_per_s": 6539.7,
        "data_wait_fraction": 0.0264,
        "peak_memory_bytes": 1581032,
        "wall_seconds": 4.41,
        "devices": 1,
        "device": "cpu",
    }
    data = ReportData(
        run_dir=tmp_path,
        model="m",
        status="finished",
        status_detail="",
        steps=630,
        total_steps=630,
        device="cpu",
        summary=summary,
        job_yaml="model: m\nbatch_size: 32\n",
        snapshot={"cpu_cores": 2, "env": {"OMP_NUM_THREADS": "1"}},
    )
    page = render_html(data)
    table = re.search(r'<table id="summary">(.*?)</table>', page, flags=re.S).group(1)
    labels = re.findall(r"<th>(.*?)</th>", table)
    assert "peak_memory_bytes" not in labels and "samples_per_s" not in labels
    assert {
        "peak memory (B)",
        "throughput (whole run, samples/s)",
        "eval accuracy",
        "data wait (whole run)",
        "wall time (s)",
    } <= set(labels)
    assert "1.5 MiB" in table and "98.7 %" in table and "2.6 %" in table
    cells = parse(page)
    assert cells.by_key["peak_memory_bytes"] == ("1,581,032", "1581032")  # the number rule and value, unchanged
    threads = cells.by_key["threads.paddle"][0]
    assert threads.startswith("2") and "OMP_NUM_THREADS" in threads and "cpu_threads" in threads


def test_each_resume_record_is_a_line_with_the_steps_lost_and_their_compute(tmp_path: Path) -> None:
    """Two resumes at the same checkpoint are two lines; the first says steps 11-14 were lost and run again and the
    compute they took; the second lost none. A record's step wins over the gap seen in the times, whose span is kept
    for the plot."""
    from paddlefit.report.resumes import resume_line

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "job.yaml").write_text("model: lenet\n")
    lines = [{"step": s, "loss": 1.0, "step_time_s": 0.1, "time": 1000.0 + 0.1 * s} for s in range(1, 11)]
    lines.append(
        {
            "event": "resume",
            "step": 10,
            "from_step": 10,
            "lost_steps": [11, 14],
            "lost_step_count": 4,
            "lost_compute_s": 0.42,
            "down_s": 30.5,
            "time": 1031.9,
        }
    )
    lines.append(
        {
            "event": "resume",
            "step": 10,
            "from_step": 10,
            "lost_steps": None,
            "lost_step_count": 0,
            "lost_compute_s": 0.0,
            "down_s": 7.25,
            "time": 1040.0,
        }
    )
    lines += [{"step": s, "loss": 1.0, "step_time_s": 0.1, "time": 1040.0 + 0.1 * s} for s in range(11, 21)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    data = build_report(run_dir)
    assert [(r.step, r.lost_steps, r.lost_compute_s, r.downtime_s) for r in data.resumes] == [
        (10, (11, 14), 0.42, 30.5),
        (10, None, 0.0, 7.25),
    ]
    assert (data.resumes[0].gap_unix, data.resumes[1].gap_unix) == (None, (1001.0, 1041.1)) and len(data.train) == 20
    assert [resume_line(r) for r in data.resumes] == [
        "resumed at step 10 (from step-00000010): down 30.5 s; steps 11-14 (4) lost and run again, 0.4 s of compute",
        "resumed at step 10 (from step-00000010): down 7.2 s; no step lost",
    ]
    row = re.search(r'<table id="resumes">.*?</table>', render_html(data), flags=re.S).group(0)
    assert "steps 11-14 (4) lost and run again, 0.4 s of compute" in row and 'data-value="0.42"' in row
    data.resumes[0].lost_steps = (11, 11)
    assert resume_line(data.resumes[0]).endswith("; step 11 lost and run again, 0.4 s of compute")


def test_one_window_prints_one_number_in_the_terminal_and_the_report(tmp_path: Path) -> None:
    """`throughput 1,648.1 samples/s` in train's summary, `1648` in report.html,
    `1,658.7` in the predicted-vs-measured table and `paddlefit runs`, data wait `2.8%` beside `2.9 %`, nothing saying
    the first pair is the whole run and the second the steps after warm-up. Each place names its window, and the
    whole-run figures print alike in the terminal summary and the page."""
    from paddlefit.cli.common import out
    from paddlefit.cli.train import render_summary
    from paddlefit.report.reading import ReportData

    summary = {
        "steps": 630,
        "epochs": 5.0,
        "global_batch": 32,
        "devices": 1,
        "device": "cpu",
        "precision": "fp32",
        "amp_active": False,
        "final_loss": 0.1,
        "eval_accuracy": 0.9866,
        "samples_per_s": 1648.12,
        "data_wait_fraction": 0.02849,
        "peak_memory_bytes": 1581032,
        "peak_memory_kind": "cpu",
        "params_sha256": "ab" * 32,
        "last_checkpoint": "step-630",
    }
    with out.capture() as cap:
        render_summary(summary)
    rows = {
        " ".join(line.split()[:-1]): line.split()[-1]
        for line in cap.get().splitlines()
        if "whole run" in line and "data wait" not in line
    }
    assert rows == {"throughput (whole run, samples/s)": "1,648.1"}
    wait = next(line for line in cap.get().splitlines() if line.strip().startswith("data wait"))
    assert " ".join(wait.split()) == "data wait (whole run) 2.8 % of step time"
    data = ReportData(
        run_dir=tmp_path,
        model="m",
        status="finished",
        status_detail="",
        steps=630,
        total_steps=630,
        device="cpu",
        summary=summary,
        job_yaml="model: m\n",
    )
    table = re.search(r'<table id="summary">(.*?)</table>', render_html(data), flags=re.S).group(1)
    throughput = re.search(r"<th>throughput \(whole run, samples/s\)</th>(.*?)</tr>", table).group(1)
    assert ">1,648.1<" in throughput and "1648<" not in throughput
    assert re.search(r"<th>data wait \(whole run\)</th>.*?<td>2.8 %</td></tr>", table)


def test_report_out_never_overwrites_the_runs_own_files(tmp_path: Path, finished_run: SharedRun) -> None:
    """`report RUN --out RUN/metrics.jsonl` (or a checkpoint's model.pdparams) wrote
    the HTML over them with exit 0, and the next train started over. Like export, report now refuses any target
    that is the run's own (by real path): exit 2 naming the option, the files untouched; an .html beside them is
    fine."""
    run_dir = finished_run.copy(tmp_path / "r")
    (ckpt,) = sorted((run_dir / "checkpoints").glob("step-*"))
    (tmp_path / "link").symlink_to(run_dir / "checkpoints")
    own = [
        run_dir / "metrics.jsonl",
        ckpt / "model.pdparams",
        ckpt / "new.html",
        run_dir / "status.json",
        run_dir / "notes.txt",
        run_dir,
        tmp_path,
        tmp_path / "link" / ckpt.name / "x.html",
    ]
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    for target in own:
        r = cli(str(run_dir), "--out", str(target))
        assert r.returncode == 2 and "Traceback" not in r.stderr, (target, r.stderr)
        assert f"`--out {target}` would overwrite the run itself" in r.stderr, r.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    r = cli(str(run_dir), "--out", str(run_dir / "mine.html"))
    assert r.returncode == 0 and (run_dir / "mine.html").read_text().startswith("<!DOCTYPE html>"), r.stderr


def test_run_dirs_named_with_undecodable_bytes_newlines_and_bidi_are_shown_escaped(tmp_path: Path) -> None:
    """`report $'runs/bell\\a\\x9bX'` (not UTF-8) was a UnicodeEncodeError traceback
    and training there went unrecorded ("run registry: UnicodeEncodeError"); report and export printed
    `runs/nl\\nsecond` with a raw line feed (a name forging a line); report.html held U+202E raw. Now the bytes
    are `\\x9b` in the registry and on screen, the line feed is `\\n`, the override `\\u202e`."""
    home = tmp_path / "home"
    env = dict(ENV, PADDLEFIT_HOME=str(home))
    spec = write_spec(tmp_path / "s.yaml", max_steps=2)
    bell, nl = tmp_path / os.fsdecode(b"bell\x07\x9bX"), tmp_path / "nl\nsecond\u202eY"
    for run_dir in (bell, nl):
        r = run(train_cmd(spec, run_dir), env=env)
        assert r.returncode == 0 and "run registry" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    rows = Registry(home / "runs.db").list_runs()
    assert [row["run_dir"] for row in rows] == [str(nl), f"{tmp_path}/bell\x07\\x9bX"]
    # wide enough that the run dir column does not fold the name across lines (how it folds depends on how long
    # pytest's tmp path is)
    r = run([sys.executable, "-m", "paddlefit.cli.main", "runs"], env={**env, "COLUMNS": "250"})
    assert r.returncode == 0 and "bell\\x07\\x9bX" in r.stdout and "Traceback" not in r.stderr, r.stderr
    r = cli(str(bell))
    assert r.returncode == 0 and r.stdout == f"{tmp_path}/bell\\x07\\x9bX/report.html\n", (r.stdout, r.stderr)
    r = cli(str(nl))
    assert r.returncode == 0 and r.stdout == f"{tmp_path}/nl\\nsecond\\u202eY/report.html\n", (r.stdout, r.stderr)
    page = (nl / "report.html").read_text()
    assert "\u202e" not in page and "second\\u202eY" in page
    r = cli(str(tmp_path / "no\nsuch"))
    assert r.returncode == 2 and f"`RUN_DIR {tmp_path}/no\\nsuch` does not exist" in r.stderr, r.stderr
    r = cli(str(tmp_path))  # a folder that holds runs is not one
    assert r.returncode == 2 and f"`RUN_DIR {tmp_path}` is not a run directory" in r.stderr, r.stderr
    r = run([sys.executable, "-m", "paddlefit.cli.main", "export", str(nl)], env=env)
    assert r.returncode == 0 and r.stdout.count("\n") == 2, (r.stdout, r.stderr)
    assert f"-> {tmp_path}/nl\\nsecond\\u202eY/inference/model (" in r.stdout, r.stdout
    r = run([sys.executable, "-m", "paddlefit.cli.main", "export", str(tmp_path / "no\nsuch")], env=env)
    assert r.returncode == 2 and f"`{tmp_path}/no\\nsuch` is not a paddlefit run directory" in r.stderr, r.stderr
    r = run([sys.executable, "-m", "paddlefit.cli.main", "export", str(nl), "--out", str(nl / "checkpoints")], env=env)
    assert r.returncode == 2 and f"`--out {tmp_path}/nl\\nsecond\\u202eY/checkpoints` would overwrite" in r.stderr
