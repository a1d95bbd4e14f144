"""Cloud GPU instance prices: the shipped SkyPilot-catalog extract (``catalog/data/gpu_prices.csv``) plus user CSVs.

The shipped file is ``shared/data/gpu-prices-skypilot-snapshot.csv``: 55 instance types of AWS (us-east-1), GCP
(us-central1, host + accelerator rows summed), Azure (eastus) and Lambda (us-east-1), each row naming the
``skypilot-org/skypilot-catalog`` file and commit it was read from (read 2026-11-30; see that file's README), plus
6 RunPod rows (region ``US``: RTX 4090 x1/2/4/8, L40S, L40) from the same repository's
``catalogs/v8/runpod/vms.csv`` @46062acb (read 2026-12-02). All prices USD per instance-hour; where each row comes
from and every source tried: ``catalog/data/SOURCES-prices.md``.
Files are parsed by header name; a bad value is an error naming file, line and column
(:mod:`paddlefit.catalog.price_csv`); SkyPilot's own cache is read by :mod:`paddlefit.catalog.skypilot`. Both
modules' public names are importable from here too.

Known catalog defects (listed in the extract's README) are handled, not hidden:

- Azure ``Standard_ND96isr_H100_v5`` says 12 GPUs; the VM has 8: counted as 8, with a note.
- A spot price at or above the on-demand price (Azure's H100 v5 rows, 98.32 = 98.32) is a placeholder: spot is
  treated as unknown, with a note.
- Rows whose price the README flags as doubtful (GCP ``a3-highgpu-8g``, ``a2-ultragpu-*``) carry a note.
"""

from __future__ import annotations

import csv
import difflib
import importlib.resources
import io
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from paddlefit.catalog.gpus import GPU, get_gpu, resolve_gpus
from paddlefit.catalog.price_csv import (
    PRICE_TEMPLATE,
    InstancePrice,
    parse_price_csv,
)
from paddlefit.catalog.published import gpu_for_skypilot_name
from paddlefit.catalog.skypilot import (
    SKYPILOT_CACHE,
    load_skypilot_cache,
)
from paddlefit.errors import CatalogError, PaddlefitError, UnknownNameError
from paddlefit.fileio import read_text_limited

# names of paddlefit.catalog.price_csv and .skypilot, importable from here: the catalog's one door to its prices
__all__ = [
    "InstanceGpu",
    "catalog_gpu",
    "check_price_gpus",
    "gpu_for_instance",
    "instance_price",
    "load_prices",
    "rows_with_gpus",
    "select_prices",
    "unpriced_gpus",
]


def load_prices(extra_files: list[str] | tuple[str, ...] = ()) -> list[InstancePrice]:
    """The shipped price rows, then each user CSV's rows; a user row replaces a shipped one with the same
    (cloud, instance_type, accelerator, gpu_count, region).

    Raises:
        CatalogError: see :func:`parse_price_csv`; PaddlefitError for an unreadable file.
    """
    shipped = (importlib.resources.files("paddlefit.catalog") / "data" / "gpu_prices.csv").read_text(encoding="utf-8")
    return merge_price_files(parse_price_csv(shipped, "paddlefit/catalog/data/gpu_prices.csv"), extra_files)


def merge_price_files(
    rows: list[InstancePrice], extra_files: list[str] | tuple[str, ...], rates: dict[str, float] | None = None
) -> list[InstancePrice]:
    """``rows`` plus each user CSV's rows (other currencies at ``rates``, see :func:`parse_price_csv`); a user row
    replaces one with the same (cloud, instance_type, accelerator, gpu_count, region).

    Raises:
        CatalogError: a file without rows (the template left as shipped), or see :func:`parse_price_csv`.
    """
    by_key = {(r.cloud, r.instance_type, r.accelerator, r.gpu_count, r.region): r for r in rows}
    for f in extra_files:
        added = parse_price_csv(read_text_limited(Path(f), "--prices"), str(f), rates)
        if not added:
            raise CatalogError(
                f"`--prices {f}` has a header but no price rows (every row commented out?); fill in at "
                "least one row, without its leading #."
            )
        for r in added:
            by_key[(r.cloud, r.instance_type, r.accelerator, r.gpu_count, r.region)] = r
    return list(by_key.values())


# ---- instance type -> GPU catalog entry ------------------------------------------------------------------------


@dataclass(frozen=True)
class InstanceGpu:
    """The GPU catalog entry an instance type has: ``gpu`` (a :class:`~paddlefit.catalog.gpus.GPU` name) and how
    that was decided (``basis``: cloud docs, instance name, an assumption, or the price file's ``gpu`` column)."""

    gpu: str
    basis: str


@lru_cache(maxsize=1)
def _instance_table() -> dict[tuple[str, str], tuple[str, str]]:
    text = (importlib.resources.files("paddlefit.catalog") / "data" / "instance_gpus.csv").read_text(encoding="utf-8")
    return {
        (r["cloud"], r["instance_type"]): (r["gpu"], f"{r['basis']} ({r['source']})")
        for r in csv.DictReader(io.StringIO(text))
    }


def gpu_for_instance(row: InstancePrice) -> InstanceGpu:
    """Which GPU catalog entry ``row``'s instance has: the price file's ``gpu`` column, else the shipped
    ``catalog/data/instance_gpus.csv`` (cloud documentation per instance type), else what the SkyPilot name is
    taken to mean (:func:`~paddlefit.catalog.published.gpu_for_skypilot_name`),
    else the accelerator name itself (the caller resolves it against the GPU catalog, where it may be unknown)."""
    if row.gpu:
        return InstanceGpu(row.gpu, "price file `gpu` column")
    table = _instance_table()
    gpu, basis = table.get((row.cloud, row.instance_type), ("", ""))
    if gpu:
        return InstanceGpu(gpu, basis)
    assumed = gpu_for_skypilot_name(row.accelerator)
    if assumed is not None:
        name, note = assumed
        return InstanceGpu(name, note or f"accelerator name {row.accelerator}")
    return InstanceGpu(row.accelerator, f"accelerator name {row.accelerator}")


SHIPPED_SOURCE = (
    "shipped SkyPilot catalog extract (skypilot-org/skypilot-catalog, read 2026-11-30, RunPod rows "
    "2026-12-02; paddlefit/catalog/data/gpu_prices.csv)"
)


def select_prices(
    extra_files: list[str] | tuple[str, ...] = (),
    *,
    skypilot_root: Path | str | None = SKYPILOT_CACHE,
    region: str | None = None,
    clouds: list[str] | tuple[str, ...] = (),
    rates: dict[str, float] | None = None,
) -> tuple[list[InstancePrice], str]:
    """The price rows ``paddlefit cost`` uses and a sentence saying where they came from.

    Clouds found in SkyPilot's cache (``skypilot_root``; None = do not look) replace the shipped rows of that cloud;
    user CSVs (``extra_files``) add or replace rows (prices in another currency at ``rates``, ``--fx-rate``);
    ``region`` keeps one region (a cloud whose rows are all in other regions drops out); ``clouds`` keeps those
    clouds.

    Raises:
        CatalogError: a malformed file, or the filters leave no rows (the message lists what exists).
    """
    rows = load_prices(())
    source = SHIPPED_SOURCE
    cache = load_skypilot_cache(skypilot_root, region, clouds) if skypilot_root is not None else {}
    if cache:
        rows = [r for r in rows if r.cloud not in cache] + [r for c in sorted(cache) for r in cache[c]]
        source = (
            f"SkyPilot's cached catalog ({Path(skypilot_root).expanduser()}) for {', '.join(sorted(cache))}"  # type: ignore[arg-type]
            + ("; shipped extract for the rest" if {r.cloud for r in rows} - set(cache) else "")
        )
    rows = merge_price_files(rows, extra_files, rates)
    if extra_files:
        source += "; user prices " + ", ".join(str(f) for f in extra_files)
    have_clouds = sorted({r.cloud for r in rows})
    if clouds:
        want = {c.strip().lower() for c in clouds}
        unknown = want - set(have_clouds)
        if unknown:
            raise CatalogError(
                f"`--cloud {', '.join(sorted(unknown))}`: no prices for that cloud; known: "
                f"{', '.join(have_clouds)} (add your own with `--prices FILE`)."
            )
        rows = [r for r in rows if r.cloud in want]
    if region:
        kept = [r for r in rows if r.region == region]
        if not kept:
            regions = sorted({f"{r.cloud}:{r.region}" for r in rows})
            raise CatalogError(
                f"`--region {region}`: no prices in that region; the rows have {', '.join(regions)}. "
                "Other regions need SkyPilot's catalog cache (`sky show-gpus` fills it) or "
                "`--prices FILE`."
            )
        rows = kept
    return rows, source


def catalog_gpu(row: InstancePrice, gpus: list[GPU]) -> GPU | None:
    """The :class:`~paddlefit.catalog.gpus.GPU` of ``row``'s instance (:func:`gpu_for_instance` resolved against
    ``gpus`` by name or alias), or None when the GPU catalog has no such GPU (e.g. Lambda's A6000)."""
    try:
        return get_gpu(gpu_for_instance(row).gpu, gpus)
    except UnknownNameError:
        return None


def rows_with_gpus(rows: list[InstancePrice], names: Iterable[str], gpus: list[GPU]) -> list[InstancePrice]:
    """The rows whose instance has one of the GPUs ``names`` (each a catalog name or alias, :func:`get_gpu`).

    Raises:
        UnknownNameError: a name that is not in ``gpus``.
        CatalogError: no row has any of them (names the GPUs and the fix).
    """
    wanted = {g.name for g in resolve_gpus(names, gpus)}
    kept = [r for r in rows if (g := catalog_gpu(r, gpus)) is not None and g.name in wanted]
    if not kept:
        raise CatalogError(
            f"No priced instance has {', '.join(sorted(wanted))}; drop `--gpu` or add prices with "
            f"`--prices FILE` (a template in CNY: {price_template()})."
        )
    return kept


def unpriced_gpus(rows: list[InstancePrice], names: Iterable[str], gpus: list[GPU]) -> list[dict[str, str]]:
    """The GPUs among ``names`` (catalog names or aliases) that no row of ``rows`` has, one ``cost --json``
    ``skipped`` entry each: ``{"gpu": name, "reason": "no priced instance in the price table (clouds: ...)"}``,
    the clouds being those of ``rows`` (after --cloud/--region). Empty when every GPU is priced.

    Raises:
        UnknownNameError: a name that is not in ``gpus``.
    """
    have = {g.name for r in rows if (g := catalog_gpu(r, gpus)) is not None}
    clouds = ", ".join(sorted({r.cloud for r in rows}))
    return [
        {
            "gpu": g.name,
            "reason": f"no priced instance in the price table (clouds: {clouds}); add your "
            f"provider's with --prices FILE (a template in CNY: {price_template()})",
        }
        for g in resolve_gpus(names, gpus)
        if g.name not in have
    ]


def price_template() -> str:
    """Path of the shipped price-file template (:data:`~paddlefit.catalog.price_csv.PRICE_TEMPLATE`)."""
    return str(importlib.resources.files("paddlefit.catalog") / "data" / PRICE_TEMPLATE)


def check_price_gpus(rows: list[InstancePrice], gpus: list[GPU]) -> None:
    """A ``gpu`` a price file names must be in the GPU catalog (an accelerator without specs is only skipped later).

    Raises:
        CatalogError: naming the price file, the instance and the GPU.
    """
    for r in rows:
        if r.gpu and catalog_gpu(r, gpus) is None:
            raise CatalogError(
                f"price file {r.source}: instance {r.instance_type} names gpu {r.gpu!r}, which is not "
                "in the GPU catalog (`paddlefit gpus`); fix the name or add the GPU with --catalog."
            )


def instance_price(instance: str, cloud: str | None, spot: bool) -> float:
    """USD/hour of one instance type from the price catalog (SkyPilot's cache or the shipped snapshot).

    Raises:
        PaddlefitError: unknown or ambiguous instance type, or no spot price when ``spot``.
    """
    rows, _ = select_prices(skypilot_root=SKYPILOT_CACHE, clouds=[cloud] if cloud else [])
    match = [r for r in rows if r.instance_type.lower() == instance.strip().lower()]
    if not match:
        close = difflib.get_close_matches(instance, sorted({r.instance_type for r in rows}), n=4, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise PaddlefitError(
            f"`--instance {instance}` is not in the price catalog.{hint} Give `--price-per-hour` "
            "instead, or see `paddlefit cost` for the priced instance types."
        )
    prices = {(r.on_demand_usd_per_hour, r.spot_usd_per_hour) for r in match}
    if len(prices) > 1:
        where = ", ".join(f"{r.cloud} {r.gpu_count}x{r.accelerator}" for r in match)
        hint = "`--price-per-hour`" if cloud else "`--cloud` or `--price-per-hour`"
        raise PaddlefitError(f"`--instance {instance}` has several prices ({where}); give {hint}.")
    row = match[0]
    if spot:
        if row.spot_usd_per_hour is None:
            raise PaddlefitError(
                f"`--instance {instance} --spot`: the catalog has no spot price for it "
                f"({row.cloud}); give `--price-per-hour`."
            )
        return row.spot_usd_per_hour
    return row.on_demand_usd_per_hour
