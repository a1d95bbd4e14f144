"""GPU spec catalog: load, validate and query ``gpus.csv`` plus optional user files.

Every row carries the document it was taken from (``source``) and how far it was checked (``verified``):
``datasheet`` (compared with NVIDIA's datasheet), ``facts-table`` (from the project's sourced fact table,
docs/sources.md#gpu-specs, not yet compared with the PDF), ``third-party`` (no vendor document was read: a
reseller's copy of the spec table, a spec database or a review, named in ``source``; e.g. AWS's A10G, NVIDIA's
China-market A800/H800/H20), ``press`` (figures from press reports of a vendor talk, e.g. Kunlunxin's K200).
Tensor-core figures are DENSE (datasheets often print sparse = 2x dense).

``paddle_device`` says which Paddle build drives the card: ``gpu`` (CUDA, the default) or ``xpu`` (Kunlunxin XPU,
``paddle.set_device("xpu")``). XPU rows have no CUDA compute capability; their ``architecture`` is the XPU
generation Paddle checks for AMP (``xpu1``/``xpu2``/``xpu3``, ``core.XPUVersion``).

Example:
    >>> get_gpu("a100").name
    'A100-SXM4-40GB'
"""

from __future__ import annotations

import csv
import difflib
import io
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from paddlefit.catalog.units import AMP_MIN_CC, AMP_MIN_XPU, compute_unit, cuda_amp_blocked, unit_label, unit_peak
from paddlefit.errors import CatalogError, UnknownNameError
from paddlefit.units import GIB, MIB
from paddlefit.validation import first_problem

#: Columns every catalog file must have (units in the names; see docs/commands/gpus.md#gpu-catalog-format).
COLUMNS = (
    "name",
    "aliases",
    "architecture",
    "compute_capability",
    "memory_gib",
    "usable_memory_mib",
    "mem_bw_gb_s",
    "fp32_tflops",
    "tf32_tflops",
    "fp16_tflops",
    "bf16_tflops",
    "int8_tops",
    "fp8_tflops",
    "nvlink_gb_s",
    "nvlink_gpus",
    "pcie_gen",
    "pcie_gb_s",
    "tdp_w",
    "sm_count",
    "l2_mib",
    "process_nm",
    "paddle_device",
    "verified",
    "source",
    "retrieved",
    "base_clock_mhz",
    "boost_clock_mhz",
    "memory_type",
    "fp32_lanes_per_sm",
    "fp16_acc16_tflops",
)

#: Columns a user catalog may leave out (files written before they existed stay valid; ``paddle_device`` = gpu).
OPTIONAL_COLUMNS = (
    "sm_count",
    "l2_mib",
    "process_nm",
    "paddle_device",
    "base_clock_mhz",
    "boost_clock_mhz",
    "memory_type",
    "fp32_lanes_per_sm",
    "fp16_acc16_tflops",
)
#: ``memory_type`` values (the DRAM generation on the board), spelled as NVIDIA's datasheets spell them.
MEMORY_TYPES = ("HBM2", "HBM2e", "HBM3", "HBM3e", "GDDR5", "GDDR6", "GDDR6X", "GDDR7")
#: ``paddle_device`` values: the ``paddle.set_device`` type that drives the card.
PADDLE_DEVICES = ("gpu", "xpu")
#: Why an XPU row's step time is not grounded like a CUDA row's (the row's ``calibration`` label and note).
XPU_UNCALIBRATED = "uncalibrated: no measured kernels or published runs for Kunlunxin XPUs"
#: Column names of earlier releases, read as their new names (``_gbps`` meant GB/s; renamed to ``_gb_s`` so it is
#: not read as Gbit/s). Deprecated: accepted for one release.
DEPRECATED_COLUMNS = {"mem_bw_gbps": "mem_bw_gb_s", "nvlink_gbps": "nvlink_gb_s", "pcie_gbps": "pcie_gb_s"}


class GPU(BaseModel):
    """One GPU model.

    Units: memory in GiB (label) and MiB (usable, as a process sees it), bandwidth in GB/s (10^9 bytes/s),
    compute in dense TFLOPS/TOPS (10^12 per second), power in watts. Empty optional figures mean the GPU has
    no such unit (no TF32 before Ampere, no BF16 before Ampere, no FP8 before Ada/Hopper).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    architecture: str = Field(min_length=1)
    # ranges far outside every real GPU's, so a typo (1e300, 1e-320) stops with the field here instead of as an
    # overflow or a zero-byte capacity later
    #: CUDA compute capability; None on XPU rows (required on ``paddle_device: gpu`` rows).
    compute_capability: float | None = Field(default=None, ge=1, le=100)
    memory_gib: float = Field(ge=1 / 16, le=2**20)
    usable_memory_mib: float | None = Field(default=None, ge=64, le=2**30)
    mem_bw_gb_s: float = Field(ge=0.1, le=1e6)
    fp32_tflops: float = Field(ge=1e-3, le=1e6)
    tf32_tflops: float | None = Field(default=None, ge=1e-3, le=1e6)
    fp16_tflops: float | None = Field(default=None, ge=1e-3, le=1e6)
    bf16_tflops: float | None = Field(default=None, ge=1e-3, le=1e6)
    int8_tops: float | None = Field(default=None, ge=1e-3, le=1e6)
    fp8_tflops: float | None = Field(default=None, ge=1e-3, le=1e6)
    nvlink_gb_s: float | None = Field(default=None, ge=0.1, le=1e6)
    nvlink_gpus: int | None = Field(default=None, ge=2, le=2**16)
    pcie_gen: int = Field(ge=1, le=7)
    pcie_gb_s: float = Field(ge=0.1, le=1e6)
    tdp_w: float | None = Field(default=None, ge=1, le=1e5)
    #: streaming multiprocessors, for GEMM wave quantization (NVIDIA architecture whitepapers: Volta V100 80,
    #: Turing T4 40, Ampere A100 108, GA102 A10 72 / A40 84 / RTX 3090 82, AD102 RTX 4090 128 / L40S 142,
    #: AD104 L4 58, Hopper H100 SXM5 132 / PCIe 114, H200 132; A10G 80 from AWS's g5 documentation; Blackwell
    #: B200 148 = 2 dies x 74, measured by Chips and Cheese; each row's ``source`` names its document). Empty =
    #: unknown, and the GEMM model then assumes full waves.
    sm_count: int | None = Field(default=None, ge=1, le=4096)
    #: L2 cache, MiB, for the kernel model's L2-resident bytes (NVIDIA architecture whitepapers: Turing TU104 4,
    #: Volta GV100 6, Ampere GA100 40 and GA102 6 (A10, A10G, A40, RTX 3090), Ada AD102 72 (RTX 4090) / 96
    #: (L40S, L40), AD104 48 (L4), Hopper GH100 50 (H100 SXM5 and PCIe, H200)). Empty = unknown (B200: the
    #: sources read disagree; H20): no L2 term.
    l2_mib: float | None = Field(default=None, ge=0, le=2**20)
    #: Process node, nm, for the energy per FP32 FLOP of the CUDA cores (NVIDIA architecture whitepapers: Turing
    #: and Volta TSMC 12 nm, GA100 TSMC 7 nm, GA102 Samsung 8 nm, Ada and Hopper TSMC 4N (5 nm class), Blackwell
    #: TSMC 4NP). Empty = unknown: the FP32 power cap is not scaled.
    process_nm: float | None = Field(default=None, ge=1, le=1000)
    paddle_device: str = "gpu"
    verified: str = Field(min_length=1)
    source: str = Field(min_length=1)
    retrieved: str = ""
    #: GPU base clock, MHz, as the card's spec sheet lists it (informational: no figure of the planner uses it).
    #: Empty = no source gave it (the row's ``source`` says so).
    base_clock_mhz: float | None = Field(default=None, ge=1, le=100_000)
    #: GPU boost clock, MHz: the clock NVIDIA quotes the FP32 peak at, so ``fp32_tflops`` ~= 2 x ``sm_count`` x
    #: ``fp32_lanes_per_sm`` x ``boost_clock_mhz`` / 1e6 (:meth:`GPU.fp32_tflops_at_boost`; checked over the
    #: catalog by ``tests/catalog``). Tensor peaks may be quoted at a lower clock (H100 SXM5: FP32 at 1980 MHz,
    #: tensor at 1830 MHz, Hopper whitepaper). Empty = no source gave it.
    boost_clock_mhz: float | None = Field(default=None, ge=1, le=100_000)
    #: DRAM generation, one of :data:`MEMORY_TYPES` (``HBM2e``, ``GDDR6X``...; case-insensitive on input).
    memory_type: str | None = None
    #: FP32 CUDA cores (FP32 lanes) per SM, from the architecture whitepapers: Volta GV100 64, Turing TU10x 64,
    #: Ampere GA100 64, GA10x 128 (64 FP32 + 64 shared FP32/INT32), Ada AD10x 128, Hopper GH100 128, Blackwell 128.
    fp32_lanes_per_sm: int | None = Field(default=None, ge=1, le=4096)
    #: Dense FP16 tensor TFLOPS with FP16 accumulate, where it differs from ``fp16_tflops`` (GeForce cards run
    #: FP32 accumulate at half that rate: RTX 3090 142 vs 71). Informational, not used for AMP: Paddle's fp16
    #: matmuls accumulate in FP32 (cuBLAS compute type CUDA_R_32F, ``paddle/phi/kernels/funcs/blas/
    #: blas_impl.cu.h``; ``FLAGS_gemm_use_half_precision_compute_type`` defaults to false), so ``fp16_tflops``,
    #: ``bf16_tflops`` and ``tf32_tflops`` are the FP32-accumulate figures. Empty = no separate figure (data-center
    #: and workstation cards run both accumulations at the same rate).
    fp16_acc16_tflops: float | None = Field(default=None, ge=1e-3, le=1e6)

    @field_validator("aliases", mode="before")
    @classmethod
    def _split_aliases(cls, v: object) -> object:
        if isinstance(v, str):
            return tuple(a.strip() for a in v.split(";") if a.strip())
        return v

    @field_validator("memory_type", mode="before")
    @classmethod
    def _check_memory_type(cls, v: object) -> object:
        if isinstance(v, str):
            by_key = {m.lower(): m for m in MEMORY_TYPES}
            if v.strip().lower() not in by_key:
                raise ValueError(f"must be one of {', '.join(MEMORY_TYPES)}")
            return by_key[v.strip().lower()]
        return v

    @field_validator("paddle_device", mode="before")
    @classmethod
    def _check_device(cls, v: object) -> object:
        if isinstance(v, str) and v.strip().lower() not in PADDLE_DEVICES:
            raise ValueError(f"must be one of {', '.join(PADDLE_DEVICES)}")
        return v.strip().lower() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _check_cuda_fields(self) -> GPU:
        if self.paddle_device == "gpu" and self.compute_capability is None:
            raise ValueError(
                "compute_capability is required on a `paddle_device: gpu` row (CUDA compute "
                "capability, e.g. 8.0); leave it empty only on `xpu` rows"
            )
        if self.paddle_device == "xpu" and self.compute_capability is not None:
            raise ValueError("compute_capability is a CUDA figure: leave it empty on a `paddle_device: xpu` row")
        if self.paddle_device == "xpu" and self.tf32_tflops is not None:
            raise ValueError(
                "tf32_tflops is an NVIDIA tensor-core figure (TF32): leave it empty on a `paddle_device: xpu` row"
            )
        if self.paddle_device == "xpu" and self.xpu_generation is None:
            raise ValueError(
                "an XPU row's architecture must be its generation, xpu1, xpu2 or xpu3 (Paddle's "
                f"core.XPUVersion), got {self.architecture!r}"
            )
        if self.base_clock_mhz and self.boost_clock_mhz and self.base_clock_mhz > self.boost_clock_mhz:
            raise ValueError(
                f"base_clock_mhz {self.base_clock_mhz:g} is above boost_clock_mhz "
                f"{self.boost_clock_mhz:g}: the base clock is the lower one (the datasheet's two clocks)"
            )
        return self

    @property
    def is_xpu(self) -> bool:
        """The card is a Kunlunxin XPU (``paddle_device: xpu``): no CUDA, cuDNN, NCCL or TF32."""
        return self.paddle_device == "xpu"

    @property
    def xpu_generation(self) -> int | None:
        """Kunlunxin XPU generation (1, 2, 3 from ``architecture`` ``xpuN``), None for CUDA rows."""
        arch = self.architecture.strip().lower()
        if arch in ("xpu1", "xpu2", "xpu3"):
            return int(arch[3])
        return None

    @property
    def device_label(self) -> str:
        """What the card is to Paddle, for tables: ``CC 8.0`` for CUDA GPUs, ``XPU2`` for Kunlunxin XPUs."""
        if self.is_xpu:
            return f"XPU{self.xpu_generation}"
        return f"{self.compute_capability:.1f}"

    def amp_blocked(self, precision: str) -> str | None:
        """Why ``paddle.amp.auto_cast`` would run ``precision`` (``fp16-o1`` ...) as fp32 on this card, or None.

        CUDA: fp16 AMP needs compute capability 7.0+, bf16 8.0+; XPU: fp16 needs XPU2+, bf16 XPU3 (Paddle
        ``python/paddle/amp/auto_cast.py``: ``_is_gpu_float16_supported``/``_is_gpu_bfloat16_supported``,
        ``_is_xpu_float16_supported``/``_is_xpu_bfloat16_supported``). fp32 is never blocked.
        """
        half = precision.split("-")[0]
        if half not in AMP_MIN_CC:
            return None
        if self.is_xpu:
            need = AMP_MIN_XPU[half]
            if (self.xpu_generation or 0) < need:
                return f"{half} AMP needs XPU{need}+ (Paddle auto_cast): Paddle runs fp32"
            return None
        return cuda_amp_blocked(self.compute_capability, precision)

    def flash_blocked(self) -> str | None:
        """Why FlashAttention-2 cannot run on this card, or None: it needs CUDA compute capability 8.0+ (Dao 2023,
        arXiv 2307.08691; Paddle ``can_use_flash_attention`` checks SM 8.0-12.1, ``python/paddle/nn/functional/
        sdpa.py``); paddlefit models no XPU flash-attention kernel, so XPU rows plan eager attention."""
        if self.is_xpu:
            return f"FlashAttention-2 is a CUDA kernel: eager attention on {self.name} (XPU)"
        if (self.compute_capability or 0) < 8.0:
            return f"FlashAttention-2 needs CC 8.0+: eager attention on {self.name}"
        return None

    def fp32_tflops_at_boost(self) -> float | None:
        """Dense FP32 TFLOPS the SM count, FP32 lanes and boost clock give: 2 FLOPs per FMA x ``sm_count`` x
        ``fp32_lanes_per_sm`` x ``boost_clock_mhz`` / 1e6 (the way NVIDIA's datasheets compute the FP32 peak), or
        None when one of the three is unknown. The catalog test holds ``fp32_tflops`` to it within a few percent."""
        if self.sm_count is None or self.fp32_lanes_per_sm is None or self.boost_clock_mhz is None:
            return None
        return 2 * self.sm_count * self.fp32_lanes_per_sm * self.boost_clock_mhz / 1e6

    @property
    def capacity_bytes(self) -> int:
        """Memory a process can use, bytes: the measured usable MiB where known, else the label GiB."""
        if self.usable_memory_mib is not None:
            return int(self.usable_memory_mib * MIB)
        return int(self.memory_gib * GIB)

    def peak_flops(self, precision: str, tf32: bool = True) -> tuple[float, str]:
        """Dense peak FLOP/s for a training precision and the unit used.

        Args:
            precision: one of ``fp32``, ``fp16-o1``, ``fp16-o2``, ``bf16-o1``, ``bf16-o2``.
            tf32: Paddle's TF32 switches are on (the default; a job's ``tf32: false`` turns them off).

        Returns:
            (FLOP/s, label of the unit: :func:`~paddlefit.catalog.units.compute_unit` and
            :func:`~paddlefit.catalog.units.unit_label`). FP32 uses TF32 tensor cores where the GPU has them and
            ``tf32`` is on, because Paddle enables TF32 in cuBLAS/cuDNN by default (``core.get_cudnn_switch()`` is
            True; Paddle ``test/legacy_test/test_tf32_cudnn.py``). A precision the GPU lacks falls back to FP32 CUDA
            cores.
        """
        unit = compute_unit(self, precision, tf32)
        return unit_peak(self, unit, precision), unit_label(unit, precision)

    def missing_peak(self, precision: str, tf32: bool = True) -> str | None:
        """Why ``precision`` is timed at a slower unit's peak than the card has (the catalog lacks the figure), or
        None: an AMP precision without its tensor-core peak falls back as :meth:`peak_flops` does; fp32 on a CUDA
        GPU of compute capability 8.0+ without a TF32 figure runs on the CUDA cores though Paddle would use TF32."""
        unit = compute_unit(self, precision, tf32)
        half = precision.split("-")[0]
        if half in ("fp16", "bf16") and not self.amp_blocked(precision) and unit != "half":
            return (
                f"no {half} peak in the catalog: timed at the {unit.upper()} peak, a lower bound (the card is faster)"
            )
        if half == "fp32" and tf32 and not self.is_xpu and (self.compute_capability or 0) >= 8.0 and unit == "fp32":
            return "no TF32 peak in the catalog: fp32 timed on CUDA cores, a lower bound (the card is faster)"
        return None

    def interconnect_gb_s(self, ranks: int = 2) -> tuple[float, str]:
        """Per-direction GPU-to-GPU bandwidth for a ring over ``ranks`` GPUs, GB/s, and the link's name.

        NVLink is used only when all ``ranks`` GPUs share it (``nvlink_gpus``: 8 on NVSwitch/SXM boards,
        2 for PCIe cards joined by a bridge); otherwise the ring crosses PCIe. NVLink datasheet figures are
        bidirectional totals, so half is one direction; PCIe figures are per direction for x16 (PCI-SIG:
        gen3 15.75, gen4 31.5, gen5 63 GB/s).
        """
        if self.nvlink_gb_s and ranks <= (self.nvlink_gpus or 2):
            return self.nvlink_gb_s / 2, "nvlink"
        return self.pcie_gb_s, f"pcie gen{self.pcie_gen}"


def _parse_rows(text: str, origin: str) -> list[GPU]:
    reader = csv.DictReader(text.splitlines())
    try:
        header = reader.fieldnames or []
    except csv.Error as exc:
        raise CatalogError(f"GPU catalog `{origin}`, line 1: {exc}; fix the CSV header.") from None
    renamed = [DEPRECATED_COLUMNS.get(c, c) for c in header]
    twice = sorted({c for c in renamed if renamed.count(c) > 1})
    if twice:
        raise CatalogError(
            f"GPU catalog `{origin}`: column(s) {', '.join(twice)} given twice (an old `_gbps` name "
            "and its `_gb_s` name count as the same column); keep one."
        )
    if any(c in DEPRECATED_COLUMNS for c in header):
        renamed = [DEPRECATED_COLUMNS.get(c, c) for c in header]
        reader = csv.DictReader(text.splitlines()[1:], fieldnames=renamed)
        header = renamed
    missing = [c for c in COLUMNS if c not in header and c not in OPTIONAL_COLUMNS]
    unknown = [c for c in header if c not in COLUMNS]
    if missing or unknown:
        raise CatalogError(
            f"GPU catalog `{origin}`: header is wrong (missing: {', '.join(missing) or 'none'}; "
            f"unknown: {', '.join(unknown) or 'none'}). Use the header of the shipped catalog: "
            f"{','.join(COLUMNS)}."
        )
    gpus: list[GPU] = []
    seen: set[str] = set()
    for line_no, row in _rows(reader, origin):
        if None in row or any(v is None for v in row.values()):
            raise CatalogError(
                f"GPU catalog `{origin}`, line {line_no}: expected {len(COLUMNS)} comma-separated fields; "
                "fix the row's field count (quote fields that contain commas)."
            )
        clean = {k: (v.strip() if v.strip() != "" else None) for k, v in row.items()}
        clean = {k: v for k, v in clean.items() if v is not None}
        try:
            gpus.append(GPU(**clean))
        except ValidationError as exc:
            field, problem = first_problem(exc)
            raise CatalogError(
                f"GPU catalog `{origin}`, line {line_no} ({clean.get('name', '?')}), field `{field}`: "
                f"{problem}. Fix that field and run again."
            ) from None
        key = gpus[-1].name.lower()
        if key in seen:
            raise CatalogError(
                f"GPU catalog `{origin}`, line {line_no}: name {gpus[-1].name!r} appears twice in this file; "
                "keep one row per GPU."
            )
        seen.add(key)
    return gpus


def _rows(reader: csv.DictReader, origin: str):
    """Enumerate CSV rows from line 2, turning the csv module's errors into CatalogError."""
    line_no = 1
    try:
        for row in reader:
            line_no += 1
            yield line_no, row
    except csv.Error as exc:
        raise CatalogError(f"GPU catalog `{origin}`, line {line_no + 1}: {exc}; fix the CSV syntax.") from None


@lru_cache(maxsize=1)
def _builtin() -> tuple[GPU, ...]:
    text = resources.files("paddlefit.catalog").joinpath("data/gpus.csv").read_text(encoding="utf-8")
    return tuple(_parse_rows(text, "paddlefit/catalog/data/gpus.csv"))


def load_gpus(extra_files: Iterable[str | Path] = ()) -> list[GPU]:
    """The shipped GPU catalog, with rows from user files added or overriding by name.

    Args:
        extra_files: CSV files with the same header as the shipped ``gpus.csv``; a row whose ``name``
            equals a shipped row (case-insensitive) replaces it.

    Returns:
        GPUs in catalog order (user-only rows last).

    Raises:
        CatalogError: a file is missing, unreadable, or has a malformed row (message names file, line, field).
    """
    by_name = {g.name.lower(): g for g in _builtin()}
    for f in extra_files:
        path = Path(f)
        from paddlefit.errors import PaddlefitError
        from paddlefit.fileio import read_text_limited

        try:
            text = read_text_limited(path, "--catalog")
        except PaddlefitError as exc:
            raise CatalogError(
                f"GPU catalog: {exc} Check the `--catalog` path (a UTF-8 CSV, see `paddlefit gpus --csv`)."
            ) from None
        for g in _parse_rows(text, str(path)):
            by_name[g.name.lower()] = g
        owner: dict[str, str] = {}
        for g in by_name.values():
            for key in (g.name.lower(), *(a.lower() for a in g.aliases)):
                if owner.setdefault(key, g.name) != g.name:
                    raise CatalogError(
                        f"GPU catalog `{path}`: name or alias {key!r} of {g.name!r} is already used by "
                        f"{owner[key]!r}; give the row a distinct name/alias or reuse {owner[key]!r} to override it."
                    )
    return list(by_name.values())


def get_gpu(name: str, gpus: Iterable[GPU] | None = None) -> GPU:
    """Look up a GPU by name or alias, case-insensitive (``a100``, ``H100-SXM``, ``rtx-4090``).

    Raises:
        UnknownNameError: no such GPU; the message lists close names and every valid name.
    """
    pool = list(gpus) if gpus is not None else load_gpus()
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    for g in pool:
        if key == g.name.lower() or key in (a.lower() for a in g.aliases):
            return g
    names = [g.name for g in pool]
    close = difflib.get_close_matches(name, names + [a for g in pool for a in g.aliases], n=4, cutoff=0.4)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise UnknownNameError(
        f"Unknown GPU {name!r}.{hint} Known GPUs: {', '.join(names)}. "
        "Add your own with `--catalog FILE` (start from `paddlefit gpus --csv`)."
    )


def resolve_gpus(names: Iterable[str], gpus: Iterable[GPU] | None = None) -> list[GPU]:
    """The catalog GPUs ``names`` denote (a name or alias each, :func:`get_gpu`), once each, in the order given.

    Raises:
        UnknownNameError: a name that is not in the catalog (close matches listed).
    """
    pool = list(gpus) if gpus is not None else load_gpus()
    return list({g.name: g for g in (get_gpu(n, pool) for n in names)}.values())


def catalog_csv(gpus: Iterable[GPU]) -> str:
    """The rows as a catalog CSV (header :data:`COLUMNS`, aliases joined by ``;``, empty for None): a file
    :func:`load_gpus` reads back (``paddlefit gpus --csv``, a template for ``--catalog``)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for g in gpus:
        d = g.model_dump()
        d["aliases"] = ";".join(g.aliases)
        writer.writerow({k: "" if d[k] is None else d[k] for k in COLUMNS})
    return buf.getvalue()


def catalog_docs(gpus: Iterable[GPU]) -> list[dict]:
    """The rows as JSON objects (``paddlefit gpus --json``): every field plus ``capacity_bytes``, with one rule for
    ``usable_memory_mib`` on every row: the MiB a process can use, as the planner does (:attr:`GPU.capacity_bytes`),
    and ``usable_memory_basis``: ``measured`` (a cloud's published process-visible figure, the CSV column) or
    ``label`` (no such figure: ``memory_gib`` x 1024, a few hundred MiB above what ``nvidia-smi`` shows)."""
    return [
        {
            **g.model_dump(),
            "usable_memory_mib": g.capacity_bytes / MIB,
            "usable_memory_basis": "label" if g.usable_memory_mib is None else "measured",
            "capacity_bytes": g.capacity_bytes,
        }
        for g in gpus
    ]
