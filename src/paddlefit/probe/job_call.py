"""How the CPU probe builds and calls a job: its inputs, its optimizer, and the loss it backpropagates.

:class:`JobCall` calls the model and takes the loss the way the job does (:mod:`paddlefit.models.calling`), with a
proxy loss (:func:`reduce_to_loss`) only for a model planned without a job; :func:`make_inputs` gives random input
tensors. The optimizer the probe steps with is ``train``'s (:func:`paddlefit.jobspec.optimizers.make_optimizer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from paddlefit.jobspec.inputs import InputSpec


def make_inputs(specs: tuple[InputSpec, ...] | list[InputSpec], batch: int, seed: int = 0) -> list[Any]:
    """Random Paddle tensors of shape (batch, *spec.shape); int ids in ``[0, spec.high or 2)`` (positional and named
    specs alike, in order; :func:`paddlefit.models.calling.make_batch` keeps the names)."""
    from paddlefit.models.calling import make_batch

    unnamed = [s.model_copy(update={"name": None}) for s in specs]
    return make_batch(unnamed, None, batch, seed).args


def reduce_to_loss(out: Any) -> Any:
    """A proxy loss for a model with no job loss: the output reduced by mean (sum over a tuple/list or dict of
    outputs); a 0-d output is taken as the model's own loss. Used only when the job's loss cannot be applied to a
    model planned without a job spec (:class:`JobCall` ``strict`` False), and said in the plan's notes."""
    import paddle

    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, list | tuple):
        parts = [reduce_to_loss(o) for o in out if isinstance(o, paddle.Tensor) and o.dtype.name != "BOOL"]
        return paddle.add_n(parts)
    if not paddle.is_floating_point(out):
        out = out.astype("float32")
    return out if out.ndim == 0 else out.mean()


@dataclass
class JobCall:
    """How the probe calls the model and takes the loss: the job's inputs, label and loss
    (:mod:`paddlefit.models.calling`).

    Attributes:
        specs: per-sample input specs (named ones are keyword arguments).
        label: the label's per-sample spec; None = generated from the loss and a first forward's output
            (:func:`~paddlefit.models.calling.infer_label_spec`).
        label_arg: the forward keyword that receives the label.
        loss: the job's loss name (None = ``cross_entropy``).
        strict: the loss is the job's (a spec or ``--loss``): an output it cannot take is an error. False (a
            model planned with no job): the probe falls back to :func:`reduce_to_loss` and says so in ``note``.
        sample: the first sample of the job's ``data.train``: when given, probe batches are copies of it collated
            as the DataLoader does (:func:`~paddlefit.models.calling.batch_of_sample`), so inputs and labels of any
            structure (dicts, nested lists) are the job's own.
    """

    specs: list[InputSpec]
    label: InputSpec | None = None
    label_arg: str | None = None
    loss: str | None = None
    strict: bool = False
    note: str | None = None
    sample: Any = None

    def __post_init__(self) -> None:
        from paddlefit.models.calling import JobLoss

        self.job_loss = JobLoss(self.loss, self.label_arg)
        self.eval_loss = JobLoss(self.loss, self.label_arg)  # eval outputs may differ (no auxiliary heads)
        self.proxy = False

    def prepare(self, model: Any) -> None:
        """Infer the label spec from one no-grad forward at batch 1 when none is given (no peak is kept: the
        caller resets the allocator peak afterwards).

        Raises:
            PaddlefitError: (strict) the loss cannot be given a label; whatever the model raises.
        """
        import paddle

        from paddlefit.models.calling import call_model, check_label_spec, infer_label_spec, make_batch, model_loss

        if self.label is not None or self.sample is not None:
            return
        if self.strict:
            check_label_spec(None, self.loss, self.label_arg)
        with paddle.no_grad():
            out = call_model(model, make_batch(self.specs, None, 1), None)
        if model_loss(out, False) is not None:
            return
        self.label = infer_label_spec(out, self.loss)
        if self.label is None:
            from paddlefit.models.calling import describe_output

            if self.strict:
                from paddlefit.errors import PaddlefitError

                raise PaddlefitError(
                    f"the model returns {describe_output(out)}; paddlefit cannot generate labels "
                    f"for `loss: {self.loss or 'cross_entropy'}` from it. Give the label's "
                    "per-sample spec (`label: SPEC` / `--label SPEC`, e.g. `int64[]:10`)."
                )
            self._use_proxy(out)

    def _use_proxy(self, out: Any) -> None:
        """From now on backpropagate :func:`reduce_to_loss` of the output, and say so in ``note``."""
        from paddlefit.models.calling import describe_output

        self.proxy = True
        self.note = (
            f"no job loss applies to the output ({describe_output(out)}): the probe backpropagated "
            "mean(output) as a proxy; give the job's loss and label (`plan --config`)"
        )

    def batch(self, batch: int, seed: int = 0) -> Any:
        """A :class:`~paddlefit.models.calling.Batch` of ``batch`` samples: copies of ``sample`` when given, else
        synthetic from the specs."""
        from paddlefit.models.calling import batch_of_sample, make_batch

        if self.sample is not None:
            return batch_of_sample(self.sample, batch, self.specs, self.label_arg)
        return make_batch(self.specs, self.label, batch, seed)

    def loss_of(self, model: Any, batch: Any) -> Any:
        """Forward and loss of one batch (the scalar to backpropagate)."""
        from paddlefit.errors import PaddlefitError
        from paddlefit.models.calling import call_model

        out = call_model(model, batch, self.label_arg)
        if self.proxy:
            return reduce_to_loss(out)
        try:
            return self.job_loss(out, batch)
        except PaddlefitError:
            if self.strict:
                raise
            self._use_proxy(out)
            return reduce_to_loss(out)
