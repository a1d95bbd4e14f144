"""The plan document's typed sections (paddlefit.plan.document): serialised in field order (the document's key
order), tuples as lists, nested sections as objects; read like the dicts they serialise to."""

from __future__ import annotations

import json

import pytest

from paddlefit.plan.document import CpuFp32Memory, MemorySection, ModelSection, PhaseFitDoc, Recommendation


def test_a_section_serialises_in_field_order_and_reads_like_its_dict() -> None:
    m = ModelSection(
        name="lenet",
        params=61_706,
        trainable_params=61_706,
        forward_flops_per_sample=7.0e5,
        train_flops_per_sample=2.1e6,
        loss="cross_entropy",
        label="int64[]:10",
        gpu_only_ops=(),
    )
    assert json.dumps(m.to_dict()) == (
        '{"name": "lenet", "params": 61706, "trainable_params": 61706, "forward_flops_per_sample": 700000.0, '
        '"train_flops_per_sample": 2100000.0, "loss": "cross_entropy", "label": "int64[]:10", "gpu_only_ops": []}'
    )
    assert m["name"] == "lenet" and m.get("loss") == "cross_entropy" and m.get("nope", 3) == 3
    with pytest.raises(KeyError):
        m["nope"]
    r = Recommendation("T4", "fastest GPU that fits", "T4", "")
    assert list(r.to_dict()) == ["target", "reason", "smallest_fit", "tie_break"] and r["target"] == "T4"


def test_the_memory_section_nests_its_parts() -> None:
    mem = MemorySection(
        method="cpu-probe",
        weights_bytes=4,
        grads_bytes=4,
        optimizer_bytes=8,
        activation_bytes_per_sample=2.0,
        fixed_bytes=1.0,
        precision_of_breakdown="fp32",
        cpu_fp32=CpuFp32Memory(4, 4, 8, 2.0, 1.0),
        dominant_phase="backward",
        phases={"forward": PhaseFitDoc(10.0, 2.0)},
        phase_peak_bytes={"forward": 74.0},
        eval_batch_size=32,
        probe_batch_sizes=(1, 2, 3),
        probe_max_rel_residual=0.0,
        notes=("a", "b"),
        lazy_build_failure=None,
    )
    d = mem.to_dict()
    assert list(d)[:8] == [
        "method",
        "weights_bytes",
        "grads_bytes",
        "optimizer_bytes",
        "activation_bytes_per_sample",
        "fixed_bytes",
        "precision_of_breakdown",
        "cpu_fp32",
    ]
    assert d["cpu_fp32"] == {
        "weights_bytes": 4,
        "grads_bytes": 4,
        "optimizer_bytes": 8,
        "activation_bytes_per_sample": 2.0,
        "fixed_bytes": 1.0,
    }
    assert d["phases"] == {"forward": {"fixed_bytes": 10.0, "per_sample_bytes": 2.0}}
    assert d["probe_batch_sizes"] == [1, 2, 3] and d["notes"] == ["a", "b"] and mem["notes"] == ["a", "b"]
