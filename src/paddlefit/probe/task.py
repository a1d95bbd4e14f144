"""The CPU probe of a plan, run in a child process under a time and a memory limit.

The probe runs the user's model on the user's inputs: some inputs corrupt Paddle's heap and deadlock the process
(LeNet on a 1x1 to 4x4 image: ``malloc(): unsorted double linked list corrupted``, then a futex wait that ignores
SIGTERM, SIGINT and SIGHUP), a forward can loop or exhaust the memory. So :func:`probe_in_child` hands a
:class:`ProbeTask` (plain data: the model's name, its inputs, the job's optimizer and calling fields) to a child
process (:class:`paddlefit.process.isolation.IsolatedCall`) that runs :func:`run_probe_task`
(:func:`~paddlefit.probe.memory.probe_memory`) and sends back a :class:`ProbeOutcome` (what the probe measured,
bit-identical to a probe run in the planner's own process: the allocator's peaks are bytes above the child's own
baseline). A deadline passed, a crash or the memory limit becomes a :class:`~paddlefit.errors.ModelError` (exit 2)
naming the model, its inputs and what happened; the planner's progress messages come through from the child.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from paddlefit.errors import ModelError, PaddlefitError
from paddlefit.estimate.probe_result import ProbeResult, ProbeTooLargeError
from paddlefit.jobspec.inputs import InputSpec
from paddlefit.jobspec.optimizers import OptimizerSettings
from paddlefit.process.isolation import ChildFailed, ChildLimits, IsolatedCall
from paddlefit.process.memlimit import end_memory_limit
from paddlefit.units import GIB

__all__ = [
    "BUILDING",
    "PRELOAD",
    "ProbeOutcome",
    "ProbeTask",
    "out_of_memory",
    "probe_child",
    "probe_in_child",
    "run_probe_task",
]

#: What the probe's child imports before its call comes, while the planner resolves the model and its inputs (1.1-1.3 s
#: for ``import paddle`` alone on the 2-core bench machine: ``bench/plan_speed.py``'s child-start row).
PRELOAD = (
    "paddle",
    "paddlefit.probe.memory",
    "paddlefit.probe.flops",
    "paddlefit.probe.fused_ref",
    "paddlefit.models.zoo",
)


@dataclass(frozen=True)
class ProbeTask:
    """What the probe's child needs, as plain data (pickled to it).

    Attributes:
        name: the model's name for messages; model, model_args: what :func:`~paddlefit.models.zoo.resolve_model`
            takes (a zoo name or ``package.module:factory``, found with the planner's ``sys.path``).
        specs: the inputs; optimizer: the job's optimizer (:func:`~paddlefit.jobspec.optimizers.make_optimizer`).
        batch_sizes, extend_to, budget_s, cpu_threads, time_threads, eval_phase, probe_requested: as
            :func:`~paddlefit.probe.memory.probe_memory` takes them.
        label, label_arg, loss, strict, sample: the job's calling fields (:class:`~paddlefit.probe.job_call.JobCall`).
    """

    name: str
    model: str
    model_args: dict[str, Any]
    specs: list[InputSpec]
    optimizer: OptimizerSettings
    batch_sizes: tuple[int, ...]
    extend_to: int
    budget_s: float
    cpu_threads: int | None = None
    time_threads: bool = False
    eval_phase: bool = True
    probe_requested: bool = True
    label: InputSpec | None = None
    label_arg: str | None = None
    loss: str | None = None
    strict: bool = False
    sample: Any = None

    @property
    def inputs(self) -> str:
        """The inputs as the user gives them: ``--input float32[1,28,28]`` ..."""
        return " ".join(f"`--input {s}`" for s in self.specs)


@dataclass(frozen=True)
class ProbeOutcome:
    """What the child sends back: the probe (:class:`~paddlefit.estimate.probe_result.ProbeResult`), the FLOPs count
    with the operator trace (:class:`~paddlefit.probe.flops.FlopsCount`), the GPU-only fused ops it ran a CPU
    reference for, and how the job's call went (``note``, the ``label`` used or generated, ``proxy`` loss,
    ``loss_how`` and ``loss_doc``: :class:`~paddlefit.models.calling.JobLoss`'s ``how`` and ``describe()``)."""

    probe: ProbeResult
    flops: Any
    stand_ins: tuple[str, ...] = ()
    note: str | None = None
    label: InputSpec | None = None
    proxy: bool = False
    loss_how: str | None = None
    loss_doc: str = field(default="")


def run_probe_task(task: ProbeTask, progress: Callable[[str], None]) -> ProbeOutcome:
    """The child's side: resolve the model, run :func:`~paddlefit.probe.memory.probe_memory` as the job calls it
    (the GPU-only fused ops on their CPU references), return what it measured.

    Raises:
        ModelError: the model fails on the inputs (:func:`~paddlefit.models.build.failure_message`), is too large
            for the free RAM, or ran out of memory (the child's limit named).
        PaddlefitError: the job's loss or label does not apply (the message of :class:`JobCall`).
    """
    from paddlefit.models.build import failure_message
    from paddlefit.models.zoo import resolve_model
    from paddlefit.probe.fused_ref import cpu_reference_kernels
    from paddlefit.probe.job_call import JobCall
    from paddlefit.probe.memory import probe_memory

    ref = resolve_model(task.model, task.model_args)
    call = JobCall(list(task.specs), task.label, task.label_arg, task.loss, strict=task.strict, sample=task.sample)
    try:  # the incubate fused ops without CPU kernels run their reference math (estimate/fused.py)
        with cpu_reference_kernels() as stand_ins:
            probe, flops = probe_memory(
                ref.factory,
                list(task.specs),
                task.optimizer,
                task.batch_sizes,
                extend_to=task.extend_to,
                budget_s=task.budget_s,
                call=call,
                cpu_threads=task.cpu_threads,
                time_threads=task.time_threads,
                eval_phase=task.eval_phase,
                probe_requested=task.probe_requested,
                progress=progress,
            )
    except ProbeTooLargeError as exc:
        raise ModelError(
            f"Model {task.name!r} with inputs {_specs(task)} is too large to probe on this machine: the CPU probe "
            f"would need about {exc.need_bytes / GIB:.1f} GiB at batch {exc.batch} and "
            f"{exc.free_bytes / GIB:.1f} GiB is free. Plan with smaller per-sample inputs (activations scale "
            "with them) or on a machine with more RAM."
        ) from None
    except MemoryError as exc:
        raise ModelError(out_of_memory(task, exc)) from None
    except (KeyboardInterrupt, PaddlefitError):
        raise
    except (Exception, SystemExit) as exc:
        raise ModelError(failure_message(ref.name, exc, "train", task.inputs, task.label_arg)) from None
    return ProbeOutcome(
        probe,
        flops,
        tuple(sorted(stand_ins)),
        call.note,
        call.label,
        call.proxy,
        call.job_loss.how,
        call.job_loss.describe(),
    )


def _specs(task: ProbeTask) -> str:
    return " ".join(str(s) for s in task.specs)


def out_of_memory(task: ProbeTask, exc: BaseException) -> str:
    """The message of an allocation that failed in the child (past its memory limit, or the machine's RAM); the
    limit is lifted first, so that the message itself can be made."""
    from paddlefit.models.build import short_error

    used, allowance = end_memory_limit() or (0, 0)
    cap = f" of the {allowance / GIB:.2f} GiB it may (`--probe-memory-gib`)" if allowance else ""
    return (
        f"Model {task.name!r} with inputs {_specs(task)} ran out of host memory in the CPU probe after allocating "
        f"{used / GIB:.2f} GiB{cap}: {short_error(exc, 200).rstrip('. :')}. Plan with smaller per-sample "
        "inputs (activations scale with them), raise `--probe-memory-gib` up to the free RAM, or plan on a machine "
        "with more RAM."
    )


def probe_child(target: str = "paddlefit.probe.task:run_probe_task", preload: tuple[str, ...] = ()) -> IsolatedCall:
    """A child process for :func:`probe_in_child` that runs ``target`` (``package.module:function``, called with the
    job and a progress callback; default :func:`run_probe_task`), started now: it imports :data:`PRELOAD` and
    ``preload`` while the caller goes on (close it, or use it as a context manager, when no probe follows)."""
    return IsolatedCall(target, PRELOAD + preload)


def probe_in_child(
    task: ProbeTask,
    limits: ChildLimits,
    progress: Callable[[str], None],
    child: IsolatedCall | None = None,
    job: Any = None,
) -> Any:
    """:func:`run_probe_task` of ``task`` in ``child`` (default: a new :func:`probe_child`) under ``limits``, or
    the child's target on ``job`` when given (a job that holds ``task``: its failures are named after ``task``);
    the child is ended when this returns. Returns what the target returned (a :class:`ProbeOutcome` by default).

    Raises:
        ModelError: the child gave no answer within ``limits.timeout_s`` (killed), was killed by a signal or exited
            without an answer (its last stderr lines quoted), or the job's first sample cannot be pickled to it;
            and what :func:`run_probe_task` raises.
    """
    child = child or probe_child()
    heard: list[str] = []  # the child's last progress message: what it was doing when it failed

    def relay(message: str) -> None:
        heard[:] = [message]
        progress(message)

    try:
        return child.call(task if job is None else job, limits, relay)
    except ChildFailed as exc:
        building = bool(heard) and heard[0].startswith(BUILDING)
        raise ModelError(_build_failed(task, limits, exc) if building else _child_failed(task, limits, exc)) from None
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        child.close()
        raise ModelError(
            f"Model {task.name!r}: the probe's job (inputs {_specs(task)} and data.train's first sample) "
            f"cannot be sent to the probe's process: {type(exc).__name__}: {exc}. Return NumPy arrays, "
            "Paddle tensors, numbers or lists/dicts of them from the dataset."
        ) from None


#: Inputs that do not suit a model, as the failures name them: LeNet on a 1x1 to 4x4 image corrupts Paddle 3.3.1's
#: heap; ids past an embedding make its CPU kernel read out of bounds (:mod:`paddlefit.plan.measure`).
_UNSUITED = "an image too small for its convolutions and poolings, ids past its embedding"


#: How the probe's child starts the progress message it sends before it builds the model (the import of the user's
#: module, its factory and ``__init__``): a failure after it is the build's (:func:`_build_failed`).
BUILDING = "building "


def _last_words(exc: ChildFailed) -> str:
    """The last three lines the child wrote on stderr, as a sentence of a message ("" when it wrote none)."""
    return f" Its last words: {' | '.join(exc.last_words.splitlines()[-3:])}." if exc.last_words else ""


def _build_failed(task: ProbeTask, limits: ChildLimits, exc: ChildFailed) -> str:
    """The message of a probe child that gave no answer while it built the model: the model, what happened."""
    said = _last_words(exc)
    what = (
        f"gave no answer in {limits.timeout_s:g} s (its time limit, `--probe-timeout`) and was killed"
        if exc.how == "timeout"
        else exc.what()
    )
    return (
        f"Model {task.name!r}: the CPU probe's process {what} while building the model (importing its module, "
        f"calling its factory and `__init__`).{said} Check that `{task.model}` builds outside paddlefit (it must "
        "not wait, exit or crash when imported or constructed), or raise `--probe-timeout` if it is only slow."
    )


def _child_failed(task: ProbeTask, limits: ChildLimits, exc: ChildFailed) -> str:
    """The message of a probe child that gave no answer: the model, its inputs, what happened, the limits."""
    said = _last_words(exc)
    head = f"Model {task.name!r} with inputs {_specs(task)}"
    if exc.how == "timeout":
        return (
            f"{head}: the CPU probe gave no answer in {limits.timeout_s:g} s (its time limit, `--probe-timeout`) "
            f"and was killed.{said} Its training step hangs on these inputs (deadlocked or looping) or is slower "
            f"than that here: check that the inputs suit the model ({_UNSUITED}), or raise `--probe-timeout`."
        )
    if exc.how == "stalled":
        return (
            f"{head}: the CPU probe {exc.what()}.{said} Its training step deadlocked on these inputs, or waits for "
            f"something that never comes (a sleep, a lock, a socket): check that the inputs suit the model "
            f"({_UNSUITED}) and that its forward does not wait."
        )
    if exc.how == "exit":  # a Python-level failure of the child (its traceback's last lines are the words)
        return f"{head}: the CPU probe's process {exc.what()}.{said}"
    near = exc.peak_rss_bytes >= 0.9 * limits.memory_bytes
    oom = (
        f" It ran out of memory: its peak RSS reached the probe's memory limit ({limits.memory_bytes / GIB:.2f} "
        "GiB, `--probe-memory-gib`)."
        if near
        else ""
    )
    return (
        f"{head}: the CPU probe's process {exc.what()}.{oom}{said} Paddle failed on these inputs (memory "
        f"corrupted or exhausted): check that they suit the model ({_UNSUITED}) and that the model trains with "
        "them outside paddlefit."
    )
