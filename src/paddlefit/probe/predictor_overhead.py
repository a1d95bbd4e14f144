"""The host cost of one Paddle Inference request, measured on this machine: :func:`measure_predictor_overhead`
(``bench/host_overhead.py`` ships the figures as ``predictor_call_s`` and ``predictor_op_s``; the serving rows of
``plan --inference`` add them to every request, :func:`paddlefit.plan.inference.request_floor`).

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

#: Ops of the long program; its request minus the 1-op program's, divided by the difference, is one op's cost.
LONG_PROGRAM_OPS = 201


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
    Paddle's native CPU kernels, IR optimisation on as served)."""
    import numpy as np
    import paddle.inference as pi

    from paddlefit.serve.program import model_files

    program, params = model_files(prefix)
    cfg = pi.Config(str(program), str(params))
    cfg.disable_gpu()
    cfg.disable_mkldnn()
    cfg.set_cpu_math_library_num_threads(1)
    cfg.switch_ir_optim(True)
    cfg.disable_glog_info()
    pred = pi.create_predictor(cfg)
    x = np.ones([1, 1], dtype="float32")
    (feed,), (fetch,) = pred.get_input_names(), pred.get_output_names()

    def request() -> None:
        h = pred.get_input_handle(feed)
        h.reshape([1, 1])
        h.copy_from_cpu(x)
        pred.run()
        pred.get_output_handle(fetch).copy_to_cpu()

    for _ in range(max(10, calls // 10)):
        request()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            request()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def measure_predictor_overhead(repeats: int = 5, calls: int = 500) -> PredictorOverhead:
    """Measure :class:`PredictorOverhead` on this CPU (a few seconds: two ``paddle.jit.save`` exports and two
    predictors). Each figure is the minimum over ``repeats`` (Python ``timeit``'s advice: other load only adds time).

    Raises:
        JobFailedError: ``paddle.jit.save`` could not export the test programs.
    """
    from paddlefit.inputspec import InputSpec
    from paddlefit.serve.program import save_inference_model

    spec = [InputSpec(shape=[1], dtype="float32")]
    with tempfile.TemporaryDirectory(prefix="paddlefit-predictor-") as tmp:
        short, long = Path(tmp) / "one", Path(tmp) / "many"
        save_inference_model(_chain_layer(1), spec, short)
        save_inference_model(_chain_layer(LONG_PROGRAM_OPS), spec, long)
        one = _request_s(short, repeats, calls)
        many = _request_s(long, repeats, calls)
    return PredictorOverhead(one, max(0.0, (many - one) / (LONG_PROGRAM_OPS - 1)))
