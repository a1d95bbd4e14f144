"""The host cost of one Paddle Inference request, measured on this machine: :func:`measure_predictor_overhead`
(``bench/host_overhead.py`` ships the figures as ``predictor_call_s`` and ``predictor_op_s``; the serving rows of
``plan --inference`` add them to every request, :func:`paddlefit.serving.plan.request_floor`).

A request through a Paddle Inference predictor is: ``get_input_handle(name).reshape`` + ``copy_from_cpu`` per
input, ``run()`` (the C++ executor runs the program's ops one after another, launching each op's kernels), and
``get_output_handle(name).copy_to_cpu()`` per output (Paddle Inference Python API,
paddlepaddle.org.cn/inference/api_reference/python_api_doc/Predictor.html). On a GPU host the executor's per-op
work is the same C++ code; the CUDA launch itself is in the GPU model's ``kernel_s``.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paddlefit.jobspec.inputs import InputSpec

#: Ops of the long program; its request minus the 1-op program's, divided by the difference, is one op's cost.
LONG_PROGRAM_OPS = 201
#: The programs' one input: a single float per sample (a request of one [1, 1] array).
SPEC = [InputSpec(shape=[1], dtype="float32")]


@dataclass(frozen=True)
class PredictorOverhead:
    """Host seconds of one Paddle Inference request besides its kernels.

    Attributes:
        call_s: a whole request of a 1-op program on a 1-element tensor (one input copied in, ``run()``, one
            output copied out): the fixed cost of a request (seconds).
        op_s: one more op in the program (seconds): the executor's dispatch of an op whose kernel does nothing.
    """

    call_s: float
    op_s: float


def _chain_layer(n: int) -> Any:
    """A ``paddle.nn.Layer`` whose forward is ``n`` element-wise adds of a parameter (a chain the IR passes cannot
    fold: each add reads the previous one's output)."""
    import paddle

    class AddChain(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.bias = self.create_parameter([1])

        def forward(self, x: Any) -> Any:
            for _ in range(n):
                x = paddle.add(x, self.bias)
            return x

    return AddChain()


def _request_s(prefix: Path, repeats: int, calls: int) -> float:
    """Minimum over ``repeats`` of the mean seconds of ``calls`` requests to the program at ``prefix`` (one thread,
    Paddle's native CPU kernels, IR optimisation on as served: :func:`~paddlefit.serving.cpu_bench.cpu_predictor`)."""
    import numpy as np

    from paddlefit.serving.cpu_bench import cpu_predictor, request
    from paddlefit.serving.program import model_files

    program, params = model_files(prefix)
    pred, names = cpu_predictor(str(program), str(params), SPEC, threads=1, onednn=False)
    x = [np.ones([1, 1], dtype="float32")]
    for _ in range(max(10, calls // 10)):
        request(pred, names, x)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            request(pred, names, x)
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def measure_predictor_overhead(repeats: int = 5, calls: int = 500) -> PredictorOverhead:
    """Measure :class:`PredictorOverhead` on this CPU (a few seconds: two ``paddle.jit.save`` exports and two
    predictors). Each figure is the minimum over ``repeats`` (Python ``timeit``'s advice: other load only adds time).

    Raises:
        JobFailedError: ``paddle.jit.save`` could not export the test programs.
    """
    from paddlefit.serving.program import save_inference_model

    with tempfile.TemporaryDirectory(prefix="paddlefit-predictor-") as tmp:
        short, long = Path(tmp) / "one", Path(tmp) / "many"
        save_inference_model(_chain_layer(1), SPEC, short)
        save_inference_model(_chain_layer(LONG_PROGRAM_OPS), SPEC, long)
        one = _request_s(short, repeats, calls)
        many = _request_s(long, repeats, calls)
    return PredictorOverhead(one, max(0.0, (many - one) / (LONG_PROGRAM_OPS - 1)))
