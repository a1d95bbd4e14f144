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
