"""Shared fixtures: a tiny user model module importable as `tinymodels:...` for import-path tests; hypothesis's
profiles (tests/test_fuzz.py)."""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

warnings.filterwarnings("ignore", category=UserWarning)
DATA = Path(__file__).parent / "data"
sys.path.insert(0, str(DATA))
# the run registry (paddlefit.runs) of every test and of the processes they start: a fresh one per test session
# (per xdist worker), never the user's own
os.environ["PADDLEFIT_HOME"] = tempfile.mkdtemp(prefix="paddlefit-home-")
# train's prediction (a planner child process, ~5 s) as `train --no-predict`: tests/train/test_predict.py turns it on
os.environ["PADDLEFIT_NO_PREDICT"] = "1"

# Hypothesis profiles. `ci`, the default: the same examples every run (derandomized: a failure in CI is one that
# reruns), no example database written into the tree, the failing example printed as a blob to replay with
# `@reproduce_failure`, no per-example deadline (a command takes 100s of ms on a loaded 2-core machine).
# `long`: a local soak, `pytest tests/test_fuzz.py --hypothesis-profile=long` (random, 20x the examples, failures
# kept in .hypothesis/ and replayed first next time). This module runs before hypothesis's pytest plugin reads
# `--hypothesis-profile` (in pytest_configure), so the option wins over the default loaded here.
settings.register_profile("ci", derandomize=True, database=None, max_examples=100, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
settings.register_profile("long", max_examples=2000, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
settings.load_profile("ci")


@pytest.fixture
def data_dir() -> Path:
    return DATA


def _cuda_devices() -> int:
    try:
        import paddle

        return paddle.device.cuda.device_count() if paddle.device.is_compiled_with_cuda() else 0
    except Exception:
        return 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`@pytest.mark.gpu` tests are skipped without a CUDA GPU and a paddlepaddle-gpu build. `slow` tests run first
    (a stable sort): under pytest-xdist the long ones start early instead of ending the run on one worker."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items or _cuda_devices():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and a paddlepaddle-gpu build")
    for item in gpu_items:
        item.add_marker(skip)
