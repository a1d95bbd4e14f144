"""paddlefit.catalog.published: the published defaults as sourced rows, and the SkyPilot names both ways."""

import pytest

from paddlefit.catalog import published
from paddlefit.catalog.gpus import get_gpu
from paddlefit.catalog.published import figure, figures, gpu_for_skypilot_name, skypilot_accelerator, skypilot_names
from paddlefit.cost.instances import DEFAULT_DISK_BYTES_PER_S
from paddlefit.cost.spot_risk import DEFAULT_INTERRUPTIONS_PER_HOUR
from paddlefit.deploy.docker import ARCH_MIN_CUDA
from paddlefit.errors import CatalogError
from paddlefit.llm.perf import DEFAULT_MFU


def test_every_figure_has_a_unit_a_source_and_a_date():
    rows = published.published_figures()
    assert len(rows) == 13
    assert all(f.unit and f.source and len(f.retrieved) == 10 for f in rows.values())


def test_the_code_reads_its_defaults_from_the_table():
    assert DEFAULT_MFU["ampere"][0] == 0.563 and DEFAULT_MFU["hopper"][0] == 0.43
    assert DEFAULT_INTERRUPTIONS_PER_HOUR == 1 / 24
    assert DEFAULT_DISK_BYTES_PER_S == 125 * 1024 * 1024
    assert ARCH_MIN_CUDA == {(8, 9): "11.8", (9, 0): "11.8", (10, 0): "12.8", (12, 0): "12.8"}
    assert set(figures("default_network_gbps")) == {"ampere", "hopper"}
    assert figure("min_cuda.cc10.0").text == "12.8"


def test_skypilot_names_both_ways_and_every_gpu_is_in_the_catalog():
    assert skypilot_accelerator("A100-SXM4-80GB") == "A100-80GB"
    assert skypilot_accelerator("V100-SXM2-32GB") == "V100-32GB"
    assert skypilot_accelerator("MI300X") is None
    assert gpu_for_skypilot_name("A100-80GB") == ("A100-PCIe-80GB", "A100-80GB form factor unknown: PCIe assumed")
    assert gpu_for_skypilot_name("RTX4090") == ("RTX-4090", "")
    assert gpu_for_skypilot_name("MI300X") is None
    assert all(get_gpu(r.gpu).name == r.gpu for r in skypilot_names())


def test_a_row_without_a_source_is_refused(monkeypatch):
    real = published.resources.files

    class Fake:
        def joinpath(self, name):
            return self

        def read_text(self, encoding):
            return "key,value,unit,source,retrieved\nx,1,s,,2026-11-30\n"

    monkeypatch.setattr(published.resources, "files", lambda pkg: Fake())
    published.published_figures.cache_clear()
    try:
        with pytest.raises(CatalogError, match="line 2: a row needs a source"):
            published.published_figures()
    finally:
        monkeypatch.setattr(published.resources, "files", real)
        published.published_figures.cache_clear()
