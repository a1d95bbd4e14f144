"""Rank 0's record of a run: the measured step times beside the plan's prediction (``RUN_DIR/comparison.json``,
:func:`paddlefit.train.predict.comparison`) and the run's row in the run registry (:mod:`paddlefit.runs`).

Only the trainer's global rank 0 makes a :class:`RunRecord`. Nothing here fails a run: a registry that is
missing, locked or corrupt is a warning (the registry's own rule), and the comparison is written with the
run's other files (atomically).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from paddlefit.fileio import FileWriteError
from paddlefit.rundir.files import read_prediction, write_comparison
from paddlefit.rundir.layout import status_name
from paddlefit.runs.registry import utc_now
from paddlefit.train.predict import (
    WARMUP_STEPS,
    catalog_gpu_name,
    checked,
    comparison,
    trainer_step_s,
)

__all__ = ["PREDICTION_KEY_ENV", "RunRecord"]

PREDICTION_KEY_ENV = "PADDLEFIT_PREDICTION_KEY"  # run_job -> launched workers: which prediction.json is this run's


class RunRecord:
    """Measured steps and the prediction of one process's share of a run (rank 0).

    ``step(seconds, wait_seconds)`` is called once per optimizer step; the first :data:`WARMUP_STEPS` of this
    process are left out of the figures (a resumed run warms up again). ``write(...)`` writes comparison.json and
    returns the document.
    """

    def __init__(self, run_dir: Path, prediction_key: str | None, log: Callable[[str], None]) -> None:
        self.run_dir = run_dir
        self.log = log
        self.prediction: dict[str, Any] | None = None
        if prediction_key:
            with contextlib.suppress(ValueError, AttributeError):
                doc: Any = read_prediction(run_dir)
                self.prediction = checked(doc) if doc.get("key") == prediction_key else None
        self.seen = 0
        self.step_s: list[float] = []
        self.wait_s: list[float] = []
        self.registry_id: int | None = None
        self.registry_ok = True
        self.device: dict[str, Any] | None = None  # device_kind, device_name (begin())

    def step(self, seconds: float, wait_seconds: float) -> None:
        """One optimizer step's wall seconds and the seconds of it spent waiting for data."""
        self.seen += 1
        if self.seen > WARMUP_STEPS:
            self.step_s.append(seconds)
            self.wait_s.append(wait_seconds)

    def write(
        self,
        *,
        global_batch: int,
        batch_size: int,
        grad_accum_steps: int,
        devices: int,
        peak_memory_bytes: int,
        failed: bool = False,
    ) -> dict[str, Any]:
        """comparison.json now (atomic); the document (:func:`~paddlefit.train.predict.comparison`).

        Raises:
            FileWriteError: comparison.json cannot be written (a full disk...), unless the run has ``failed``
                already: then a warning, and the document is still returned (for the registry row).
        """
        doc = comparison(
            self.prediction,
            step_s=self.step_s,
            wait_s=self.wait_s,
            global_batch=global_batch,
            batch_size=batch_size,
            grad_accum_steps=grad_accum_steps,
            devices=devices,
            peak_memory_bytes=peak_memory_bytes,
            warmup_steps=WARMUP_STEPS,
        )
        if doc["device"] is None:  # not predicted: the device the registry row names
            dev = self.device or {}
            doc["device"] = {"kind": dev.get("device_kind"), "name": dev.get("device_name"), "count": devices}
        try:
            write_comparison(self.run_dir, doc)
        except FileWriteError as exc:
            if not failed:
                raise
            self.log(f"warning: {exc}")
        return doc

    # ---- the registry (paddlefit.runs) ---------------------------------------------------------------------
    def _registry(self, action: Callable[[Any], Any]) -> Any:
        """Run ``action(registry)``; after one failed write the run stops writing to the registry (a locked or
        corrupt database warns once and costs no more waits)."""
        if not self.registry_ok:
            return None
        from paddlefit.runs.registry import Registry

        failed: list[str] = []

        def warn(msg: str) -> None:
            failed.append(msg)
            self.log(f"warning: {msg}")

        try:
            result = action((Registry(), warn))
        except Exception as exc:  # the registry never fails a run (a bug in it included): warn, train on
            warn(f"run registry: {type(exc).__name__}: {str(exc)[:200]}; the run goes on without it")
            result = None
        if failed:
            self.registry_ok = False
        return result

    def begin(
        self,
        spec: Any,
        *,
        model: Any,
        on_gpu: bool,
        world: int,
        global_batch: int,
        resumed: bool,
        replaced: bool = False,
    ) -> None:
        """Record the run in the registry (a resume takes over the run directory's newest row again; ``replaced``,
        a ``--resume never`` that deleted an earlier run's checkpoints: that run's row is marked ``replaced``)."""
        spec_doc = spec.model_dump(mode="json")
        fields = {
            "run_dir": str(self.run_dir),
            "spec_json": spec_doc,
            "spec_sha256": hashlib.sha256(json.dumps(spec_doc, sort_keys=True).encode()).hexdigest(),
            "model": spec.model,
            "params": int(sum(int(np.prod(p.shape)) for p in model.parameters())),
            "precision": spec.precision.value,
            "micro_batch_size": spec.batch_size,
            "grad_accum_steps": spec.grad_accum_steps,
            "global_batch": global_batch,
            "device_count": world,
            **self._device_fields(on_gpu),
            **_versions(on_gpu),
        }
        self.device = {k: fields[k] for k in ("device_kind", "device_name")}
        p = self.prediction
        if p and p.get("status") == "predicted":
            step = trainer_step_s(p, spec.grad_accum_steps)
            fields.update(
                predicted_step_s=step,
                predicted_samples_per_s=global_batch / step,
                predicted_peak_bytes=p.get("peak_memory_bytes"),
                predicted_mfu=p.get("mfu"),
            )

        def record(reg_warn: tuple[Any, Callable[[str], None]]) -> int | None:
            reg, warn = reg_warn
            if replaced and (gone := reg.find_latest_for_run_dir(str(self.run_dir), warn)) is not None:
                reg.update_run(
                    gone,
                    {
                        "status": "replaced",
                        "reason": f"replaced by a `--resume never` run started "
                        f"{utc_now()}; its checkpoints were deleted",
                    },
                    warn,
                )
            old = reg.find_latest_for_run_dir(str(self.run_dir), warn) if resumed else None
            if old is not None and reg.resume_run(old, fields, warn):
                return old
            return reg.start_run(fields, warn)

        self.registry_id = self._registry(record)

    def _device_fields(self, on_gpu: bool) -> dict[str, Any]:
        dev = (self.prediction or {}).get("device")
        if dev and dev.get("name"):
            return {"device_kind": dev["kind"], "device_name": dev["name"]}
        if not on_gpu:
            return {"device_kind": "cpu", "device_name": "cpu"}
        import paddle

        raw = paddle.device.cuda.get_device_name()
        try:
            name = catalog_gpu_name(raw)
        except Exception:  # a catalog that does not load never fails the run
            name = None
        return {"device_kind": "gpu", "device_name": name or raw}  # unmatched: the driver's name

    def update(
        self, doc: dict[str, Any], *, ended: tuple[int, str] | None = None, results: dict[str, Any] | None = None
    ) -> None:
        """The run's row: the measured figures of ``doc`` (:meth:`write`'s), and at the end (``ended`` = exit
        code, reason) its status and ``results`` (steps, final_loss, eval_loss, eval_accuracy)."""
        if self.registry_id is None:
            return
        fig = {f["name"]: f for f in doc["figures"]}
        fields: dict[str, Any] = {
            "measured_step_s": fig["step_time_s"]["measured"],
            "measured_step_p95_s": fig["step_time_p95_s"]["measured"],
            "measured_samples_per_s": fig["samples_per_s"]["measured"],
            "measured_peak_bytes": fig["peak_memory_bytes"]["measured"],
            "measured_mfu": fig["mfu"]["measured"],
            "data_wait_fraction": fig["data_wait_fraction"]["measured"],
            "comparison_json": doc,
            **(results or {}),
        }
        if ended is not None:
            code, reason = ended
            fields.update(status=status_name(code), exit_code=code, reason=reason[:2000], ended_at=utc_now())
        rid = self.registry_id
        self._registry(lambda rw: rw[0].update_run(rid, fields, rw[1]))


def _versions(on_gpu: bool) -> dict[str, Any]:
    """Paddle's version, the CUDA it was built with and the NVIDIA driver's (None on CPU or when NVML cannot tell)."""
    import paddle

    cuda = driver = None
    if on_gpu:
        cuda = str(paddle.version.cuda())
        with contextlib.suppress(Exception):
            import pynvml

            pynvml.nvmlInit()
            d = pynvml.nvmlSystemGetDriverVersion()
            driver = d.decode() if isinstance(d, bytes) else str(d)
    return {"paddle_version": paddle.__version__, "cuda_version": cuda, "driver_version": driver}


def _newest(run_dir: Path) -> dict[str, Any] | None:
    """The run directory's newest registry row, or None (none, or a registry that cannot be read). Never raises."""
    from paddlefit.runs.registry import Registry, RegistryError

    with contextlib.suppress(RegistryError, OSError, ValueError):
        reg = Registry()
        rid = reg.find_latest_for_run_dir(run_dir)
        return reg.get_run(rid) if rid is not None else None
    return None


def newest_row(run_dir: Path) -> tuple[int, int | None] | None:
    """(id, pid) of the run directory's newest registry row, or None (none, or a registry that cannot be read).
    Never raises. A launched run's rank 0 makes a new row or takes over this one (a resume), with its own pid."""
    row = _newest(run_dir)
    return None if row is None else (row["id"], row["pid"])


def settle_launched_row(
    run_dir: Path, code: int, reason: str, before: tuple[int, int | None] | None, log: Callable[[str], None]
) -> None:
    """After a launched run's launcher exits: this run's registry row ends as the run did (exit ``code``,
    ``reason``), as ``status.json`` says, where rank 0 could not record that itself.

    Rank 0 records its end (:meth:`RunRecord.update`), but Paddle's launcher stops the surviving workers 3 s after
    one fails (``pod.stop(timeout=3)`` in ``paddle/distributed/launch/controllers/controller.py``): a rank 0 still
    in a failed collective can be killed before it writes, and its row stayed ``running`` (listed ``lost``). And
    the parent rewrites a rank's exit 203 (a peer lost) to 1 when the lost rank was killed on this node
    (:func:`paddlefit.train.launcher.run_launched`). The row is this run's when :func:`newest_row` changed since
    ``before`` (its value before the launch: rank 0 made a row or took one over); it is updated when it is still
    ``running`` or has another exit code. Never raises (a registry that cannot be written is a warning)."""
    from paddlefit.runs.registry import Registry, RegistryError
    from paddlefit.runs.schema import LOST

    row = _newest(run_dir)
    if row is None or (row["id"], row["pid"]) == before:
        return
    if row["status"] in ("running", LOST) or row["exit_code"] != code:
        with contextlib.suppress(RegistryError, OSError, ValueError):
            Registry().update_run(
                row["id"],
                {"status": status_name(code), "exit_code": code, "reason": reason[:2000], "ended_at": utc_now()},
                lambda msg: log(f"warning: {msg}"),
            )
