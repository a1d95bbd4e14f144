"""Export a checkpoint of a run as a ``paddle.jit.save`` inference model and check it against the dynamic model."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from paddlefit.errors import JobFailedError, PaddlefitError
from paddlefit.fileio import FileWriteError, fsync_path, no_space_left
from paddlefit.jobspec.inputs import InputSpec
from paddlefit.jobspec.spec import load_job_spec
from paddlefit.models.exporting import flatten_outputs, jit_target
from paddlefit.process.userimport import add_recorded_dirs
from paddlefit.rundir.checkpoint_files import read_manifest, read_model_bytes
from paddlefit.rundir.files import checkpoints_dir, export_dir, import_dirs_file, spec_file
from paddlefit.rundir.layout import MANIFEST_FILE, MODEL_FILE, SPEC_FILE
from paddlefit.textsafe import log_stderr, name_safe
from paddlefit.train.checkpoint import CheckpointStore, verify

#: Tolerances of the exported-vs-dynamic check (fp32; observed differences are 0 to a few ulp).
RTOL, ATOL = 1e-5, 1e-6


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_run` wrote and how closely the reloaded model matched.

    Attributes:
        out_dir: directory holding the inference model (prefix ``model``).
        checkpoint: the checkpoint exported.
        files: file names written.
        max_abs_diff: max |jit.load output - dynamic output| over the sample batch.
        sample_batch: samples in the check batch.
    """

    out_dir: Path
    checkpoint: Path
    files: list[str]
    max_abs_diff: float
    sample_batch: int


#: What an export directory holds (``paddle.jit.save`` with PIR: model.json + model.pdiparams; legacy: .pdmodel).
EXPORT_FILES = frozenset({"model.json", "model.pdiparams", "model.pdmodel", "model.pdiparams.info"})


def _check_out_dir(out_dir: Path, run_dir: Path) -> None:
    """Refuse an ``--out`` that would replace anything but an earlier export (never delete user files)."""
    from paddlefit.fileio import refuse_run_target

    refuse_run_target(out_dir, run_dir, "--out", export_dir(run_dir))
    if out_dir.exists():
        if not out_dir.is_dir():
            raise PaddlefitError(f"`--out {name_safe(out_dir)}` is a file; give a directory (it is created).")
        held = {p.name for p in out_dir.iterdir()}
        others = sorted(held - EXPORT_FILES)
        if others:
            raise PaddlefitError(
                f"`--out {name_safe(out_dir)}` exists and holds other files "
                f"({', '.join(others[:3])}); give a new directory (only an earlier export is "
                "replaced)."
            )
        if held and not ("model.pdiparams" in held and held & {"model.json", "model.pdmodel"}):
            raise PaddlefitError(
                f"`--out {name_safe(out_dir)}` holds {', '.join(sorted(held))} but no whole earlier "
                "export (a program, model.json or model.pdmodel, with its model.pdiparams); give a "
                "new directory (only an earlier export is replaced)."
            )


def _tmp_dir(out_dir: Path, pid: int | str) -> Path:
    """The folder export ``pid`` writes beside ``out_dir`` before its rename: ``.NAME.tmp-PID`` (``"*"``: a glob)."""
    return out_dir.parent / f".{out_dir.name}.tmp-{pid}"


def _remove_stale_tmp(out_dir: Path) -> None:
    """Remove the :func:`_tmp_dir` folders an export killed before its rename left beside ``out_dir`` (their
    process is gone; a running export's folder is left alone)."""
    import psutil

    for tmp in out_dir.parent.glob(_tmp_dir(out_dir, "*").name):
        pid = tmp.name.rsplit("-", 1)[1]
        if pid.isdigit() and not psutil.pid_exists(int(pid)) and tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)


def sample_batch(spec: Any, n: int = 8) -> Any:
    """Up to ``n`` samples of the run's eval (else train) dataset, collated as the DataLoader does, as a
    :class:`~paddlefit.models.calling.Batch` (inputs by position and keyword, as ``train`` calls the model)."""
    from paddle.io.dataloader.collate import default_collate_fn

    from paddlefit.examples.datasets import resolve_dataset
    from paddlefit.models.calling import batch_from_loader, to_tensors

    key, ref, args = (
        ("data.eval", spec.data.eval, spec.data.eval_args)
        if spec.data.eval
        else ("data.train", spec.data.train, spec.data.train_args)
    )
    if ref is None:
        raise PaddlefitError("the run's job spec has no dataset to take a sample batch from (`data.train`).")
    ds = resolve_dataset(ref, args, key)
    samples = [ds[i] for i in range(min(n, len(ds)))]
    return batch_from_loader(to_tensors(default_collate_fn(samples)), spec.input_specs(), spec.label_arg)


class _Gone(Exception):
    """A checkpoint changed or vanished while it was read (pruned by the run that is still training)."""


def _read_weights(path: Path) -> tuple[dict[str, Any], bytes]:
    """(manifest, bytes of model.pdparams) of checkpoint ``path``, the bytes checked against the manifest's
    sha256: one consistent read, whatever a running trainer deletes meanwhile (a file open or read stays whole).

    Raises:
        _Gone: a file is missing or does not match the manifest.
    """
    try:
        manifest: Any = read_manifest(path, MANIFEST_FILE)
        data = read_model_bytes(path)
        meta = manifest["files"][MODEL_FILE]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _Gone(f"it cannot be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(manifest, dict) or hashlib.sha256(data).hexdigest() != meta.get("sha256"):
        raise _Gone("model.pdparams does not match its manifest")
    return manifest, data


def _newest_checkpoint(run_dir: Path, attempts: int = 10) -> tuple[Path, dict[str, Any], bytes]:
    """The newest checkpoint of ``run_dir`` that verifies, read (:func:`_read_weights`); each newer one skipped is
    said on stderr ("skipping checkpoint ...: why"). A run that is training
    prunes its old checkpoints as it writes new ones (``keep_last``), so the newest one can vanish between
    choosing and reading it: then the choice is made again.

    Raises:
        PaddlefitError: no checkpoint verifies (after ``attempts`` tries when checkpoints kept vanishing).
    """
    store = CheckpointStore(checkpoints_dir(run_dir))
    for attempt in range(attempts):  # the skipped ones are said once, as `train` says them
        path = store.latest_valid(log_stderr if attempt == 0 else lambda _msg: None)
        if path is not None:
            try:
                return (path, *_read_weights(path))
            except _Gone:
                pass
        elif not store.list():
            break
        time.sleep(0.05 * (attempt + 1))  # one was pruned or replaced between listing and reading
    raise PaddlefitError(f"`{name_safe(run_dir)}` has no checkpoint that verifies; train first.")


def _chosen_checkpoint(run_dir: Path, checkpoint: Path | None) -> tuple[Path, dict[str, Any], bytes]:
    """The checkpoint to export (``checkpoint``, else the run's newest valid one), its manifest and its weights'
    bytes.

    Raises:
        PaddlefitError: the given checkpoint fails verification or vanished while read.
    """
    if checkpoint is None:
        return _newest_checkpoint(run_dir)
    if (problem := verify(Path(checkpoint))) is not None:
        raise PaddlefitError(f"`--checkpoint {name_safe(checkpoint)}`: {problem}.")
    try:
        manifest, params = _read_weights(Path(checkpoint))
    except _Gone as exc:
        raise PaddlefitError(
            f"`--checkpoint {name_safe(checkpoint)}`: {exc} (a run still training there "
            "deleted it? Pass a newer one, or leave --checkpoint out for the newest)."
        ) from None
    return Path(checkpoint), manifest, params


def _jit_save(target: Any, tmp: Path, input_spec: list[Any], out_dir: Path) -> None:
    """``paddle.jit.save(target, tmp/model, input_spec)``, a full disk said as such.

    Raises:
        FileWriteError: the disk filled (Paddle's writer leaves a short file and says nothing).
        JobFailedError: Paddle cannot convert the model to a static graph (the cause from its trace).
    """
    import paddle

    try:
        paddle.jit.save(target, str(tmp / "model"), input_spec=input_spec)
        if full := no_space_left(tmp):  # Paddle's writer leaves a short file on a full disk, and says nothing
            raise FileWriteError(out_dir, full, "--out")
    except OSError:
        raise
    except Exception as exc:
        if full := no_space_left(tmp):
            raise FileWriteError(out_dir, full, "--out") from None
        import re

        # to_static's error is "In transformed code:" + the trace; the cause is its last `XxxError: ...` line
        causes = re.findall(r"^\s*(\w+(?:Error|Exception): .+)$", str(exc), re.M)
        why = causes[-1].strip()[:400] if causes else f"{type(exc).__name__}: {str(exc)[:400]}"
        raise JobFailedError(
            f"paddle.jit.save could not convert the model to a static graph: {why}. Known "
            "causes: Python control flow on tensor values, which does not convert with a dynamic "
            "batch dimension (PaddleNLP's Llama checks its attention mask's shape this way); "
            "ops written for Paddle's legacy static graph (`LayerHelper.append_op`, e.g. "
            "ppdet 2.6.0's multiclass_nms), which Paddle 3's PIR refuses."
        ) from None


def _reload_diff(tmp: Path, xs: list[Any], refs: list[Any]) -> float:
    """The largest |difference| between the reloaded ``tmp/model``'s outputs on ``xs`` and the dynamic model's
    ``refs``.

    Raises:
        PaddlefitError: a different number of outputs, another shape, or a difference beyond rtol/atol.
    """
    import paddle

    loaded = paddle.jit.load(str(tmp / "model"))
    loaded.eval()
    gots = [t.numpy() for t in flatten_outputs(loaded(*xs))]
    if len(gots) != len(refs):
        raise PaddlefitError(
            f"the exported model returns {len(gots)} tensors, the dynamic model {len(refs)}; not written."
        )
    diff = 0.0
    for i, (got, ref) in enumerate(zip(gots, refs, strict=True)):
        d = float(np.max(np.abs(got.astype("float64") - ref.astype("float64")))) if ref.size else 0.0
        diff = max(diff, d)
        if got.shape != ref.shape or not np.allclose(got, ref, rtol=RTOL, atol=ATOL):
            raise PaddlefitError(
                f"the exported model's output {i} differs from the dynamic model's (max |diff| "
                f"{d:g}, shapes {got.shape} vs {ref.shape}); not written."
            )
    return diff


def _loaded_model(spec: Any, run_dir: Path, checkpoint: Path, manifest: dict[str, Any], params: bytes) -> Any:
    """The job's model built and loaded with the checkpoint's weights (``params``: model.pdparams's bytes).

    Raises:
        PaddlefitError: the checkpoint was written for another model, cannot be loaded, or does not match.
    """
    import paddle

    from paddlefit.models.zoo import resolve_model

    if manifest.get("spec_model") not in (None, spec.model):
        raise PaddlefitError(
            f"`--checkpoint {name_safe(checkpoint)}` was written for model "
            f"`{manifest['spec_model']}`, this run trains `{spec.model}`; pass a checkpoint of "
            f"{name_safe(run_dir)}."
        )
    from paddlefit.models.build import build

    model = build(resolve_model(spec.model, dict(spec.model_args)).factory)
    try:
        missing, unexpected = model.set_state_dict(paddle.load(io.BytesIO(params)))
    except Exception as exc:
        raise PaddlefitError(
            f"`{name_safe(checkpoint)}/model.pdparams` cannot be loaded ({type(exc).__name__}: {str(exc)[:200]})."
        ) from None
    if missing or unexpected:
        raise PaddlefitError(
            f"`{name_safe(checkpoint)}` does not match model `{spec.model}` (missing "
            f"{list(missing)[:3]}, unexpected {list(unexpected)[:3]})."
        )
    return model


def export_run(run_dir: Path, checkpoint: Path | None = None, out_dir: Path | None = None) -> ExportResult:
    """Write ``paddle.jit.save(model, OUT/model, input_spec)`` for a run's newest valid (or given) checkpoint,
    reload it with ``paddle.jit.load`` and compare outputs with the dynamic model on up to 8 samples of the run's
    eval (else train) dataset. The model is written to a temporary directory and renamed into place only after
    the check passes.

    Raises:
        PaddlefitError: no job spec or no valid checkpoint in ``run_dir``, or the reloaded model's outputs differ
            beyond rtol 1e-5 / atol 1e-6.
        JobFailedError: ``paddle.jit.save`` cannot convert the model to a static graph (exit code 1: the model,
            not the input, fails).
    """
    run_dir = Path(run_dir)
    spec_path = spec_file(run_dir)
    if not spec_path.is_file():  # the paths first: a wrong one is said before Paddle's import (a second)
        raise PaddlefitError(
            f"`{name_safe(run_dir)}` is not a paddlefit run directory (no {SPEC_FILE}); give the "
            "--run-dir of a `paddlefit train` run."
        )
    out_dir = Path(out_dir) if out_dir is not None else export_dir(run_dir)
    _check_out_dir(out_dir, run_dir)
    import paddle

    add_recorded_dirs(import_dirs_file(run_dir))  # the run's own modules, wherever export runs from
    spec = load_job_spec(spec_path)
    checkpoint, manifest, params = _chosen_checkpoint(run_dir, checkpoint)
    model = _loaded_model(spec, run_dir, checkpoint, manifest, params)
    model.eval()
    batch = sample_batch(spec)
    names: list[str | None] = [None] * len(batch.args) + list(batch.kwargs)
    xs = [*batch.args, *batch.kwargs.values()]
    input_spec = [
        paddle.static.InputSpec([None, *x.shape[1:]], dtype=x.dtype, name=n or f"input_{i}")
        for i, (x, n) in enumerate(zip(xs, names, strict=True))
    ]
    tmp = _tmp_dir(out_dir, os.getpid())
    _remove_stale_tmp(out_dir)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        with paddle.no_grad():
            out = model(*batch.args, **batch.kwargs)
        refs = [t.numpy() for t in flatten_outputs(out)]
        if not refs:
            raise PaddlefitError(
                f"model `{spec.model}` returned no tensors in eval mode ({type(out).__name__}); nothing to export."
            )
        _jit_save(jit_target(model, out, names), tmp, input_spec, out_dir)
        diff = _reload_diff(tmp, xs, refs)
        files = sorted(p.name for p in tmp.iterdir())
        for f in tmp.iterdir():
            fsync_path(f)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.rename(tmp, out_dir)
        fsync_path(out_dir.parent)
    except OSError as exc:  # FileWriteError says why (a full disk...)
        why = getattr(exc, "why", None) or exc.strerror or exc
        raise PaddlefitError(
            f"cannot write `{name_safe(out_dir)}` ({why}); nothing was written: free space or choose another --out."
        ) from None
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
    return ExportResult(out_dir, Path(checkpoint), files, diff, batch.size)


def input_specs_of_run(run_dir: Path) -> list[InputSpec]:
    """The inputs ``paddlefit export`` gives the exported model of a run (:func:`paddlefit.train.export.export_run`
    takes them from a sample batch of the run's eval, else train, dataset): dtype, per-sample shape and feed name
    of each; ``high`` from the job spec's ``inputs`` if set there, else 1 + the largest id in the sample batch.

    Raises:
        PaddlefitError: ``run_dir`` has no job spec, or its dataset cannot be read.
    """
    if not spec_file(run_dir).is_file():
        raise PaddlefitError(f"`{name_safe(run_dir)}` is not a paddlefit run directory (no {SPEC_FILE}).")
    add_recorded_dirs(import_dirs_file(run_dir))
    spec = load_job_spec(spec_file(run_dir))
    batch = sample_batch(spec)
    declared = {s.name or i: s for i, s in enumerate(spec.input_specs())}
    specs = []
    for i, (x, name) in enumerate([(x, None) for x in batch.args] + list(batch.kwargs.items())):
        a = x.numpy()
        high = getattr(declared.get(name or i), "high", None) or max(1, int(a.max(initial=0)) + 1)
        ints = a.dtype.kind in "iu"
        specs.append(InputSpec(dtype=str(a.dtype), shape=tuple(a.shape[1:]), name=name, high=high if ints else None))
    return specs
