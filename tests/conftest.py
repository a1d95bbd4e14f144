"""Shared fixtures: a tiny user model module importable as `tinymodels:...` for import-path tests; hypothesis's
profiles (tests/test_fuzz.py); finished `paddlefit train` runs that several tests read, trained once per session."""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable
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
# after the two above: trainrun copies the environment for the processes it starts (tests/data, on sys.path)
from trainrun import DP_KILL_JOB, SLOW60_JOB, SharedRun, run, train_cmd, write_spec  # noqa: E402

# Hypothesis profiles. `ci`, the default: the same examples every run (derandomized: a failure in CI is one that
# reruns), no example database written into the tree, the failing example printed as a blob to replay with
# `@reproduce_failure`, no per-example deadline (a command takes 100s of ms on a loaded 2-core machine).
# `long`: a local soak, `pytest tests/test_fuzz.py --hypothesis-profile=long` (random, 20x the examples, failures
# kept in .hypothesis/ and replayed first next time). This module runs before hypothesis's pytest plugin reads
# `--hypothesis-profile` (in pytest_configure), so the option wins over the default loaded here.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    max_examples=100,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long", max_examples=2000, deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")


@pytest.fixture
def data_dir() -> Path:
    return DATA


def _shared(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """The directory ``build(dir)`` filled, once per session: under pytest-xdist the workers share the session's
    base directory, and the first to need ``name`` builds it while any other waits on the lock (a second build
    would only take the CPU the first one needs)."""
    base = factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    where, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with open(root / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir()
            build(where)
            done.touch()
    return where


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, Callable[[Path], object]], Path]:
    """``shared_dir(name, build)``: a directory ``build`` fills once per test session, for every xdist worker (a
    module-scoped fixture is built once per worker that runs any of its tests). Read it; copy it to change it."""
    return lambda name, build: _shared(tmp_path_factory, name, build)


def _trained(factory: pytest.TempPathFactory, name: str, job: dict, *extra: str) -> SharedRun:
    """A finished `train` of trainrun.write_spec(**job), as ``name``: spec ``s.yaml``, run directory ``run``."""

    def build(d: Path) -> None:
        r = run(train_cmd(write_spec(d / "s.yaml", **job), d / "run", *extra))
        assert r.returncode == 0, r.stderr[-3000:]

    d = _shared(factory, name, build)
    return SharedRun(d / "s.yaml", d / "run")


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    """`train` of trainrun.write_spec's digits job for 2 steps (no periodic checkpoint: the final one only)."""
    return _trained(tmp_path_factory, "finished", {"max_steps": 2})


@pytest.fixture(scope="session")
def dp_reference(tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    """The uninterrupted `train --devices 2` of trainrun.DP_KILL_JOB, which its killed and resumed runs must equal."""
    return _trained(tmp_path_factory, "dp-reference", DP_KILL_JOB, "--devices", "2")


@pytest.fixture(scope="session")
def slow60_reference(tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    """The uninterrupted one-process `train` of trainrun.SLOW60_JOB."""
    return _trained(tmp_path_factory, "slow60-reference", SLOW60_JOB)


def _cuda_devices() -> int:
    try:
        import paddle

        return paddle.device.cuda.device_count() if paddle.device.is_compiled_with_cuda() else 0
    except Exception:
        return 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`@pytest.mark.gpu` tests are skipped without a CUDA GPU and a paddlepaddle-gpu build. `slow` tests run first
    (a stable sort): under pytest-xdist the long ones start early instead of ending the run on one worker. A test
    marked `serial` outside a file that names `mark.serial` fails collection: `make test` collects the serial part
    from the files that do (`grep -l`), and would run such a test in neither part."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    hidden = sorted(
        {
            str(item.path)
            for item in items
            if item.get_closest_marker("serial") and "mark.serial" not in item.path.read_text()
        }
    )
    if hidden:
        raise pytest.UsageError(
            f"tests marked serial in files without `mark.serial` (make test would skip them): {', '.join(hidden)}"
        )
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items or _cuda_devices():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and a paddlepaddle-gpu build")
    for item in gpu_items:
        item.add_marker(skip)
