"""Runs calibrate the plan: a device's predicted step time corrected by what this machine's recorded runs measured.

Every ``train`` run records the plan's uncalibrated prediction and the measured step time (median, without the
data wait; :mod:`paddlefit.train.predict`) in the run registry (:mod:`paddlefit.runs`). For a device with such
runs, :func:`fit_correction` fits one factor ``c`` that multiplies the predicted step time:
``log c = mean_i log(measured_i / predicted_i)``, the least-squares fit of ``log measured = log predicted +
log c`` (the geometric mean of the ratios; a log-space fit, so a run 2x too slow and one 2x too fast weigh the
same). When runs of the same model exist on the device, only those are used (the model's own error is then what
is corrected); otherwise all the device's runs (what the model gets wrong on that device: clocks, drivers,
Paddle's kernels there). The residuals, in percent of the measured step, are shown before and after the fit.

Calibration never leaves the machine: the rows are read from the local registry, and nothing is sent anywhere.

GPU rows only. A GPU row's time is the per-operator model's: the same trace gives the same prediction, so a factor
fitted on earlier runs corrects the next prediction. The CPU row is not a model but a measurement (the probe's
training steps on this CPU), and its error from one probe to the next is noise, not bias: seven `plan` calls of
the digits job on this 2-core machine gave 6.7-13 ms for the same step, and a factor fitted on two runs' probes
made the next probe worse in 2 of 3 calls (seen by a new-user try). The runs of the CPU row are in the registry
(``paddlefit runs``) but do not correct it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from paddlefit.plan.document import RunsCorrection
from paddlefit.plan.request import Target

__all__ = ["DeviceRuns", "RunsCorrection", "apply_runs", "fit_correction", "load_device_runs", "read_device_runs"]


#: a run's median step counts only over at least this many measured steps (after the warm-up): a run stopped, or
#: resumed, a few steps after its start is a few samples of a noisy time, not a measurement of the device
MIN_MEASURED_STEPS = 20


def _usable(row: dict[str, Any]) -> bool:
    p, m = row.get("predicted_step_s"), row.get("measured_step_s")
    doc = row.get("comparison_json")
    steps = doc.get("measured_steps") if isinstance(doc, dict) else None  # rows without a document: published runs
    if isinstance(steps, int) and steps < MIN_MEASURED_STEPS:
        return False
    return isinstance(p, int | float) and isinstance(m, int | float) and p > 0 and m > 0 and math.isfinite(p / m)


def fit_correction(rows: list[dict[str, Any]], model: str | None, device: str) -> RunsCorrection | None:
    """The correction for ``device`` from registry ``rows`` (dicts with ``predicted_step_s``,
    ``measured_step_s``, ``model`` and ``id``; seconds), preferring runs of ``model`` (module docstring). A row
    whose ``comparison_json`` counts fewer than :data:`MIN_MEASURED_STEPS` measured steps is left out.

    Returns:
        None when no row has both a positive predicted and measured step time.
    """
    usable = [r for r in rows if _usable(r)]
    same = [r for r in usable if model is not None and r.get("model") == model]
    use = same or usable
    if not use:
        return None
    logs = [math.log(r["measured_step_s"] / r["predicted_step_s"]) for r in use]
    factor = math.exp(sum(logs) / len(logs))
    before = [r["predicted_step_s"] / r["measured_step_s"] - 1 for r in use]
    after = [r["predicted_step_s"] * factor / r["measured_step_s"] - 1 for r in use]
    return RunsCorrection(
        device=device,
        n=len(use),
        factor=factor,
        same_model=bool(same),
        residuals_before=before,
        residuals_after=after,
        run_ids=[int(r["id"]) for r in use if r.get("id") is not None],
    )


@dataclass(frozen=True)
class DeviceRuns:
    """The registry's measured runs of one device, as read by :func:`read_device_runs`: ``rows`` (dicts as
    :func:`fit_correction` takes them) and ``warning``, said in the row's notes when the registry could not be read
    (then no rows)."""

    rows: tuple[dict[str, Any], ...] = ()
    warning: str | None = None


def load_device_runs(device: str) -> tuple[list[dict[str, Any]], str | None]:
    """The registry's finished runs on GPU ``device`` with predicted and measured step times, and a warning when
    the registry cannot be read (then no rows: the plan is not calibrated by runs). Reads the user's run registry
    (:class:`~paddlefit.runs.registry.Registry`): the shell of this module."""
    try:
        from paddlefit.runs.registry import Registry

        rows = Registry().measured_runs(device)
    except Exception as exc:  # a missing/corrupt/newer registry never fails a plan: the plan says so instead
        return [], f"run registry not read ({str(exc)[:200]}): not calibrated by runs"
    return rows, None


def read_device_runs(devices: Iterable[str]) -> dict[str, DeviceRuns]:
    """:func:`load_device_runs` of each of ``devices`` (catalog GPU names), by name: what :func:`apply_runs` takes."""
    out = {}
    for device in devices:
        rows, warning = load_device_runs(device)
        out[device] = DeviceRuns(tuple(rows), warning)
    return out


def apply_runs(target: Target, runs: DeviceRuns | None, model: str) -> Target:
    """A GPU :class:`~paddlefit.plan.request.Target` corrected by its device's recorded ``runs``
    (:func:`fit_correction`): step time x factor, samples/s and MFU / factor, ``calibration`` = ``runs (n=K)``,
    ``runs_calibration`` the correction and a note with the residuals; a new row (``target`` is not changed). A row
    with no step time (or the CPU row: module docstring) is returned as it is, one with no usable runs with only
    the registry's warning added to its notes, if any. Pure: the caller reads the registry
    (:func:`read_device_runs`)."""
    if target.kind != "gpu" or target.step_time_s != target.step_time_s or runs is None:
        return target
    notes = (*target.notes, runs.warning) if runs.warning else target.notes
    corr = fit_correction(list(runs.rows), model, target.name)
    if corr is None:
        return replace(target, notes=notes) if runs.warning else target
    corr = replace(corr, uncalibrated_step_s=target.step_time_s)
    mfu = target.predicted_mfu / corr.factor if target.predicted_mfu is not None else None
    return replace(
        target,
        step_time_s=target.step_time_s * corr.factor,
        samples_per_s=target.samples_per_s / corr.factor,
        predicted_mfu=mfu,
        calibration=corr.label,
        runs_calibration=corr,
        notes=(*notes, corr.note()),
    )
