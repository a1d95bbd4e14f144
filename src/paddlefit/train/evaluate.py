"""Evaluation over ``data.eval``: loss and accuracy at ``data.eval_batch_size`` samples per forward, backing off on
out-of-memory like training does."""

from __future__ import annotations

from typing import Any

import numpy as np

from paddlefit.errors import JobFailedError, PaddlefitError
from paddlefit.train.data import guard_single_process
from paddlefit.train.oom import OutOfMemory, first_line, is_out_of_memory, oom_line
from paddlefit.train.step import StepRunner

__all__ = ["class_axis", "evaluate"]

NO_EVAL: dict[str, float | None] = {"eval_loss": None, "eval_accuracy": None}


def class_axis(logits: Any, y: Any) -> int | None:
    """The class axis for an accuracy of integer labels ``y`` against ``logits``: -1 when the labels are the logits'
    shape without the last axis (or one per sample), 1 for NCHW maps (labels (N, d1, ...) against (N, C, d1, ...)),
    None when they do not pair (no accuracy)."""
    if logits is None or y is None or "int" not in str(y.dtype):
        return None
    o, lab = list(logits.shape), list(y.shape)
    if len(o) >= 3 and lab in ([o[0], *o[2:]], [o[0], 1, *o[2:]]):
        return 1
    if int(np.prod(lab)) * o[-1] == int(np.prod(o)):
        return -1
    return None


def evaluate(runner: StepRunner, step: int) -> dict[str, float | None]:
    """``{"eval_loss", "eval_accuracy"}`` over ``data.eval`` after optimizer step ``step`` (both None without
    ``data.eval``). The loss is the model's own or the job's, as in training, averaged over samples; accuracy is
    argmax of the logits == label, for the default ``cross_entropy`` with integer labels of the logits' shape.
    Out of memory (``oom_backoff``): the eval restarts with half the batch, down to 1 sample.

    Raises:
        PaddlefitError: reading ``data.eval`` failed, or out of memory at eval batch 1 (or with
            ``oom_backoff: false``).
        JobFailedError: the model or loss raised (exit 1, as in a training step).
    """
    split = runner.eval_split
    while True:
        try:
            return _evaluate_once(runner, step)
        except OutOfMemory as exc:
            current = split.size
            if not runner.spec.oom_backoff or not split.can_halve():
                raise PaddlefitError(
                    f"eval at step {step}: out of memory at eval batch {current}: {exc}. Lower "
                    "`data.eval_batch_size`; `paddlefit plan --config` predicts the eval peak."
                ) from None
            split.halve()
            runner.free_cached()
            runner.log(
                f"eval at step {step}: out of memory at eval batch {current} ({exc}); evaluating again at {split.size}."
            )


def _evaluate_once(runner: StepRunner, step: int) -> dict[str, float | None]:
    import paddle

    from paddlefit.models.calling import call_model, prediction_of

    job, spec = runner.job, runner.spec
    if job.eval_ds is None:
        return dict(NO_EVAL)
    errors: list[str] = []
    dataset, collate = guard_single_process(job.eval_ds, errors)
    loader = paddle.io.DataLoader(dataset, batch_size=runner.eval_split.size, shuffle=False, collate_fn=collate)
    job.model.eval()
    total, loss_sum, correct, scored = 0, 0.0, 0, 0
    try:
        with paddle.no_grad():
            for data in loader:
                if errors:
                    break
                batch = runner.as_batch(data)
                with runner.autocast():
                    out = call_model(job.model, batch, spec.label_arg)
                n = batch.size
                loss_sum += float(job.eval_loss(out, batch).item()) * n
                logits = prediction_of(out, bool(spec.label_arg and batch.label is not None))
                y = batch.label
                axis = class_axis(logits, y) if spec.loss_name == "cross_entropy" else None
                if axis is not None:
                    correct += int(
                        (logits.argmax(axis=axis).reshape([-1]) == y.reshape([-1])).astype("int64").sum().item()
                    )
                    scored += int(np.prod(y.shape))
                total += n
                # the next batch's forward must not run while this one's outputs are alive (two logit tensors)
                del out, logits, batch, data
    except PaddlefitError as exc:
        raise PaddlefitError(f"eval at step {step}: {exc}") from None
    except (Exception, SystemExit) as exc:
        if is_out_of_memory(exc):
            raise OutOfMemory(oom_line(exc)) from None
        raise JobFailedError(
            f"eval at step {step}: the model or loss raised {type(exc).__name__}: {first_line(exc)} "
            f"(model `{spec.model}`, loss `{job.eval_loss.describe()}`, data.eval)."
        ) from None
    finally:
        job.model.train()
    if errors or total == 0:
        raise PaddlefitError(
            f"eval at step {step}: reading `data.eval` failed: {errors[0] if errors else 'no batches'}"
        )
    return {"eval_loss": loss_sum / total, "eval_accuracy": correct / scored if scored else None}
