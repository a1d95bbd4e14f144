"""Shared fixtures: a tiny user model module importable as `tinymodels:...` for import-path tests."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

warnings.filterwarnings("ignore", category=UserWarning)
DATA = Path(__file__).parent / "data"
sys.path.insert(0, str(DATA))


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
    """`@pytest.mark.gpu` tests are skipped without a CUDA GPU and a paddlepaddle-gpu build."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items or _cuda_devices():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and a paddlepaddle-gpu build")
    for item in gpu_items:
        item.add_marker(skip)
