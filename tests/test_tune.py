"""paddlefit tune: trial bookkeeping, the budget, the written spec, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from paddlefit.spec import JobSpec, load_job_spec
from paddlefit.tune.trials import apply_settings, tune

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow
def test_tune_bookkeeping_on_the_input_bound_example() -> None:
    spec = load_job_spec(EXAMPLES / "digits-warped.yaml").model_copy(update={"batch_size": 16})
    r = tune(spec, budget_s=600, steps=4, warmup=1, confirm=1)
    cores = os.cpu_count() or 1
    labels = [t.label for t in r.trials]
    assert labels[: min(cores, 8)] == [f"num_workers={w}" for w in range(1, min(cores, 8) + 1)]
    finalists = {r.baseline.label} | {t.label for t in sorted(r.trials, key=lambda t: -t.samples_per_s[0])[:2]}
    for t in [r.baseline, *r.trials]:
        assert len(t.samples_per_s) == (2 if t.label in finalists else 1), t.label  # first run + 1 confirmation
        assert all(s > 0 for s in t.samples_per_s) and len(t.step_s) == len(t.samples_per_s)
    assert r.best.median >= r.baseline.median and r.ratio == pytest.approx(r.best.median / r.baseline.median)
    assert r.best.label in finalists
    tuned = apply_settings(spec, r.best.settings)
    for key, value in r.best.settings.items():
        section, name = key.split(".")
        assert getattr(getattr(tuned, section), name) == value


def test_budget_keeps_only_the_baseline_and_apply_settings() -> None:
    spec = load_job_spec(EXAMPLES / "digits.yaml").model_copy(update={"batch_size": 16})
    r = tune(spec, budget_s=1e-3, steps=3, warmup=0, confirm=1)
    assert r.trials == [] and r.best is r.baseline and r.ratio == 1.0 and len(r.baseline.samples_per_s) == 2
    s2 = apply_settings(spec, {"data.num_workers": 2, "data.prefetch_factor": 4, "FLAGS_cudnn_exhaustive_search": True})
    assert (s2.data.num_workers, s2.data.prefetch_factor, s2.batch_size) == (2, 4, 16)


def test_tune_cli_writes_the_winning_spec(tmp_path: Path) -> None:
    out = tmp_path / "best.yaml"
    env = dict(os.environ, GLOG_minloglevel="2")
    r = subprocess.run([sys.executable, "-m", "paddlefit.cli.main", "tune", str(EXAMPLES / "digits.yaml"), "--steps",
                        "3", "--warmup", "0", "--confirm", "1", "--budget-minutes", "0.0001", "--write", str(out),
                        "--json"], capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert {"baseline", "best", "ratio", "trials"} <= set(d) and d["ratio"] == 1.0
    assert JobSpec.model_validate(yaml.safe_load(out.read_text())) == load_job_spec(EXAMPLES / "digits.yaml")
    bad = subprocess.run([sys.executable, "-m", "paddlefit.cli.main", "tune", str(EXAMPLES / "digits.yaml"),
                          "--budget-minutes", "0"], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "--budget-minutes" in bad.stderr
