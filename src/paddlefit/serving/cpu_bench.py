"""Inference latency of an exported model on this CPU, served as a service would serve it: Paddle Inference
(``paddle.inference``) with oneDNN, measured in a child process (``python -m paddlefit.serving.cpu_bench``).

The child reads a JSON request on stdin, writes JSON lines on stdout (one per configuration, then ``{"done": ...}``)
and all Paddle prints on stderr. One child per thread count: each peak RSS is that of one serving process with one
predictor, and a crash in Paddle never takes the caller with it.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from paddlefit.errors import InputSpecError, JobFailedError, PaddlefitError
from paddlefit.jobspec.inputs import InputSpec
from paddlefit.process.quietstart import at_signal_exit
from paddlefit.process.safepath import python_command, safe_env
from paddlefit.serving.program import input_names, model_files, random_inputs
from paddlefit.textsafe import name_safe

#: Timed runs kept per configuration however long they take (the median and p95 of fewer mean little).
MIN_TIMED_RUNS = 5


@dataclass(frozen=True)
class CpuLatency:
    """One measured configuration of :func:`benchmark_cpu`.

    Attributes:
        batch_size: samples per request.
        threads: ``Config.set_cpu_math_library_num_threads`` (oneDNN / math library threads).
        median_s: median wall time of one request (seconds): inputs copied in, ``predictor.run()``, outputs copied
            out.
        p95_s: 95th percentile of the same (seconds; numpy ``percentile``, linear interpolation).
        runs: timed runs (after the warm-up ones).
        peak_rss_bytes: peak resident memory of the serving process after this batch size (bytes; ``VmHWM``, see
            :func:`_peak_rss_bytes`), Paddle itself included: batch sizes are run in ascending order in
            one process per thread count, so it is the peak of serving every batch size up to this one.
    """

    batch_size: int
    threads: int
    median_s: float
    p95_s: float
    runs: int
    peak_rss_bytes: int

    @property
    def samples_per_s(self) -> float:
        """Throughput at the median latency (samples per second): ``batch_size / median_s``."""
        return self.batch_size / self.median_s if self.median_s > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        """The fields plus ``samples_per_s``, JSON-ready (seconds, bytes)."""
        return {**asdict(self), "samples_per_s": self.samples_per_s}


def _shown(values: Sequence[int]) -> str:
    """Values as typed on the command line: ``0``, or ``1, 0`` for a repeated option (``none`` when empty)."""
    return ", ".join(str(v) for v in values) or "none"


def check_bench_args(
    batch_sizes: Sequence[int], threads: Sequence[int], *, warmup: int = 10, runs: int = 50, max_seconds: float = 20.0
) -> tuple[list[int], list[int]]:
    """(batch sizes ascending, thread counts in the order given), each once, after checking them.

    Raises:
        PaddlefitError: none given, a batch size < 1 (``--batch-size``), a thread count < 1 or above
            ``os.cpu_count()`` (``--threads``), ``warmup`` < 0, ``runs`` < :data:`MIN_TIMED_RUNS`,
            ``max_seconds`` <= 0.
    """
    cores = os.cpu_count() or 1
    if not batch_sizes or any(not 1 <= int(b) <= 65536 for b in batch_sizes):
        raise PaddlefitError(
            f"`--batch-size {_shown(batch_sizes)}`: give batch sizes from 1 to 65536, e.g. `-b 1 -b 8`."
        )
    if not threads or any(not 1 <= int(t) <= cores for t in threads):
        raise PaddlefitError(
            f"`--threads {_shown(threads)}`: give thread counts from 1 to {cores} (this machine's "
            "logical CPUs), e.g. `--threads 1`."
        )
    if warmup < 0 or runs < MIN_TIMED_RUNS or not max_seconds > 0:
        raise PaddlefitError(
            f"warmup={warmup}, runs={runs}, max_seconds={max_seconds}: give warmup >= 0, runs >= "
            f"{MIN_TIMED_RUNS} and max_seconds > 0."
        )
    return sorted({int(b) for b in batch_sizes}), list(dict.fromkeys(int(t) for t in threads))


def benchmark_cpu(
    prefix: Path,
    specs: Sequence[InputSpec],
    batch_sizes: list[int],
    threads: list[int],
    *,
    warmup: int = 10,
    runs: int = 50,
    max_seconds: float = 20.0,
    progress: Callable[[str], None] | None = None,
    timeout_s: float | None = None,
    onednn: bool = True,
    deadline: float | None = None,
) -> list[CpuLatency]:
    """Latency of the saved model at ``prefix`` on this CPU with Paddle Inference: ``Config(program, params)``,
    ``disable_gpu()``, ``enable_mkldnn()`` (oneDNN; ``onednn=False``: ``disable_mkldnn()``),
    ``set_cpu_math_library_num_threads(n)``, IR optimisation on (the default), ``create_predictor`` (API:
    paddlepaddle.org.cn/inference/api_reference/python_api_doc/Config/CPUConfig.html). Per batch size (ascending)
    the inputs are random (:func:`random_inputs`), ``warmup`` requests are run (fewer once half of ``max_seconds``
    is spent), then up to ``runs`` timed requests, stopping once ``max_seconds`` (seconds, warm-up included) are
    spent but never before :data:`MIN_TIMED_RUNS`. One child process per thread count (see the module doc);
    ``peak_rss_bytes`` is that serving process's peak RSS, Paddle included.

    With a ``deadline`` the measurement stops there: each thread count gets an equal share of the time left when
    its child starts (none when the share is shorter than an earlier child took to its first result), a batch size
    is measured only while its share allows one warm-up and
    :data:`MIN_TIMED_RUNS` requests at the latency the previous batch size implies (linear in the batch), and
    what is not measured is left out of the result (the caller lists it).

    Args:
        progress: called with one line per finished configuration.
        deadline: ``time.time()`` (seconds since the epoch) by which the measurement ends; None: no limit.
        timeout_s: limit per child process (seconds); default ``120 + len(batch_sizes) * (3 * max_seconds + 60)``.

    Returns:
        One :class:`CpuLatency` per (batch size, thread count), sorted by batch size, then thread count.

    Raises:
        PaddlefitError: bad arguments (:func:`check_bench_args`), missing model files (:func:`model_files`), or the
            child timed out.
        InputSpecError: ``specs`` do not match the model's inputs.
        JobFailedError: the child failed (Paddle crashed); the message names the model file and ends with the
            child's last stderr lines.
    """
    batches, thread_counts = check_bench_args(batch_sizes, threads, warmup=warmup, runs=runs, max_seconds=max_seconds)
    program, params = model_files(prefix)
    random_inputs(specs, 1)  # dtype check before any child starts
    if timeout_s is None:
        timeout_s = 120 + len(batches) * (3 * max_seconds + 60)
    results: list[CpuLatency] = []
    first_result_s = 0.0  # the longest wait for a child's first result: its start-up and one batch size
    for i, n in enumerate(thread_counts):
        share = None if deadline is None else time.time() + (deadline - time.time()) / (len(thread_counts) - i)
        if share is not None and share - time.time() <= first_result_s:
            break  # this child could not even start and measure one batch size in its share
        started, got = time.time(), len(results)
        request = {
            "op": "bench",
            "program": str(program),
            "params": str(params),
            "threads": n,
            "runs": runs,
            "specs": [s.model_dump() for s in specs],
            "batch_sizes": batches,
            "warmup": warmup,
            "max_seconds": max_seconds,
            "onednn": onednn,
            "deadline": share,
        }

        def on_line(doc: dict[str, Any], started: float = started, got: int = got) -> None:
            nonlocal first_result_s
            if len(results) == got:  # this child's first result
                first_result_s = max(first_result_s, time.time() - started)
            r = CpuLatency(**doc)
            results.append(r)
            if progress is not None:
                progress(
                    f"batch {r.batch_size}, {r.threads} thread(s): median {r.median_s * 1e3:.3f} ms, "
                    f"p95 {r.p95_s * 1e3:.3f} ms ({r.runs} runs)"
                )

        _run_child(request, program, timeout_s, on_line)
    return sorted(results, key=lambda r: (r.batch_size, r.threads))


def predict_cpu(
    prefix: Path,
    specs: Sequence[InputSpec],
    inputs: Sequence[np.ndarray],
    *,
    threads: int = 1,
    timeout_s: float = 300.0,
) -> list[np.ndarray]:
    """The saved model's outputs (in ``predictor.get_output_names()`` order) for ``inputs`` (one array per spec,
    batch first), computed as :func:`benchmark_cpu` serves it (Paddle Inference, oneDNN, in a child process).

    Raises:
        PaddlefitError: as :func:`benchmark_cpu`; also ``inputs`` not one per spec.
    """
    check_bench_args([1], [threads])
    program, params = model_files(prefix)
    if len(inputs) != len(specs):
        raise InputSpecError(f"predict_cpu: {len(inputs)} input arrays for {len(specs)} input specs; give one each.")
    with tempfile.TemporaryDirectory(prefix="paddlefit-predict-") as tmp:
        np.savez(Path(tmp) / "in.npz", *[np.asarray(a) for a in inputs])
        request = {
            "op": "predict",
            "program": str(program),
            "params": str(params),
            "threads": threads,
            "specs": [s.model_dump() for s in specs],
            "inputs": str(Path(tmp) / "in.npz"),
            "outputs": str(Path(tmp) / "out.npz"),
        }
        _run_child(request, program, timeout_s, lambda doc: None)
        with np.load(Path(tmp) / "out.npz") as z:
            return [z[f"arr_{i}"] for i in range(len(z.files))]


def _run_child(
    request: dict[str, Any], program: Path, timeout_s: float, on_line: Callable[[dict[str, Any]], None]
) -> None:
    """Run ``python -m paddlefit.serving.cpu_bench`` with ``request``; ``on_line`` gets each ``{"result": ...}``.

    Raises:
        InputSpecError: the child reported a mismatch of specs and model inputs.
        PaddlefitError: the child did not finish within ``timeout_s`` seconds (it is killed).
        JobFailedError: the child exited non-zero (or by a signal) without a result.
    """
    env = safe_env(os.environ)
    env.setdefault("GLOG_minloglevel", "2")  # glog's INFO lines off (glog reads this lower-case name)
    with tempfile.TemporaryFile() as errf:
        proc = subprocess.Popen(
            python_command(module="paddlefit.serving.cpu_bench"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errf,
            env=env,
            preexec_fn=_die_with_parent,
        )
        forget = at_signal_exit(proc.kill)  # a Ctrl-C or SIGTERM of the parent ends the child too
        lines: queue.Queue[bytes | None] = queue.Queue()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        deadline, done, error = time.monotonic() + timeout_s, False, None
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(request).encode())
            proc.stdin.close()
            while True:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                if line is None:
                    break
                doc = json.loads(line)
                if "result" in doc:
                    on_line(doc["result"])
                done, error = done or "done" in doc, error or doc.get("error")
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except (queue.Empty, subprocess.TimeoutExpired):
            raise JobFailedError(
                f"benchmarking `{name_safe(program)}` took longer than {timeout_s:.0f} s and was "
                "stopped (a busy machine, or batches too large for this CPU). Its last stderr lines: " + _tail(errf)
            ) from None
        except (OSError, ValueError) as exc:  # a broken pipe, a line that is not JSON: the child is killed
            error = error or f"{type(exc).__name__}: {exc}"
        finally:
            forget()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if error and proc.returncode == 2:
            raise InputSpecError(f"`{name_safe(program)}`: {error}")
        if proc.returncode != 0 or not done:
            how = (
                f"was killed by {signal.Signals(-proc.returncode).name}"
                if proc.returncode < 0
                else f"exited with code {proc.returncode}"
            )
            raise JobFailedError(
                f"Paddle Inference on `{name_safe(program)}` failed: the benchmark process {how}"
                + (f" ({error})" if error else "")
                + ". Its last stderr lines: "
                + _tail(errf)
            )


def _tail(errf: Any) -> str:
    """The child's last 8 stderr lines joined by `` | `` (no blank lines, no traceback carets), or ``(none)``."""
    errf.seek(0)
    tail = [
        ln.strip()[:300] for ln in errf.read().decode(errors="replace").splitlines() if set(ln.strip()) - set("^~ ")
    ][-8:]
    return " | ".join(tail) or "(none)"


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGKILL when the parent dies (``prctl(PR_SET_PDEATHSIG)``, man 2 prctl),
    so a parent killed outright leaves no benchmark running. Elsewhere nothing."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


# ---- the child process ---------------------------------------------------------------------------------------
def cpu_predictor(
    program: str, params: str, specs: Sequence[InputSpec], threads: int, onednn: bool = True
) -> tuple[Any, list[str]]:
    """A Paddle Inference CPU predictor for the saved program (oneDNN on, or Paddle's native CPU kernels with
    ``onednn=False``; ``threads`` math-library threads; IR optimisation on, as served) and the model's feed names in
    the order of ``specs``.

    Raises:
        InputSpecError: the specs' names differ from the model's feed names and their counts differ too.
    """
    import paddle.inference as pi

    cfg = pi.Config(str(program), str(params))
    cfg.disable_gpu()
    cfg.enable_mkldnn() if onednn else cfg.disable_mkldnn()
    cfg.set_cpu_math_library_num_threads(int(threads))
    cfg.switch_ir_optim(True)
    cfg.disable_glog_info()  # the per-pass log, tens of lines per predictor
    pred = pi.create_predictor(cfg)
    have, want = list(pred.get_input_names()), input_names(specs)
    if sorted(have) == sorted(want):
        return pred, want
    if len(have) == len(want):  # feed names the specs do not know: by position
        return pred, have
    raise InputSpecError(
        f"the model has {len(have)} input(s) {have}, the input specs give {len(want)} {want}; give "
        "one spec per model input."
    )


def _child_predictor(req: dict[str, Any]) -> tuple[Any, list[str]]:
    """:func:`cpu_predictor` for a child's JSON request."""
    return cpu_predictor(
        req["program"],
        req["params"],
        [InputSpec(**s) for s in req["specs"]],
        int(req["threads"]),
        req.get("onednn", True),
    )


def request(pred: Any, names: list[str], arrays: list[np.ndarray]) -> list[np.ndarray]:
    """One request to ``pred`` (:func:`cpu_predictor`): ``arrays`` copied into the feeds ``names``, ``run()``,
    every output copied out (numpy arrays)."""
    for name, a in zip(names, arrays, strict=True):
        h = pred.get_input_handle(name)
        h.reshape(list(a.shape))
        h.copy_from_cpu(a)
    pred.run()
    return [pred.get_output_handle(n).copy_to_cpu() for n in pred.get_output_names()]


def _peak_rss_bytes() -> int:
    """This process's peak RSS in bytes: ``VmHWM`` of ``/proc/self/status`` on Linux (proc(5)), else
    ``getrusage(RUSAGE_SELF).ru_maxrss`` (bytes on macOS, KiB elsewhere; getrusage(2)). Not ``ru_maxrss`` on Linux:
    execve keeps the larger of the old and new memory's peaks there, so a child started by a process that holds
    500 MiB (a CLI that just exported a model) reports at least 500 MiB; measured with Python 3.11 here."""
    import resource

    try:
        with open("/proc/self/status") as f:
            kib = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
        return int(kib) * 1024
    except (OSError, StopIteration, IndexError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)


def _bench(req: dict[str, Any], emit: Callable[[dict[str, Any]], None]) -> None:
    """Measure every batch size of ``req`` (ascending) with one predictor; ``emit`` one result each."""
    pred, names = _child_predictor(req)
    specs = [InputSpec(**s) for s in req["specs"]]
    warmup, runs, deadline = int(req["warmup"]), int(req["runs"]), req.get("deadline")
    done: tuple[int, float] | None = None  # the last (batch, median seconds) measured
    for i, batch in enumerate(req["batch_sizes"]):
        budget = float(req["max_seconds"])
        if deadline is not None:  # see benchmark_cpu: a batch runs only if its share allows its fewest requests
            left = deadline - time.time()
            need = (1 + MIN_TIMED_RUNS) * done[1] * batch / done[0] if done else 0.0
            if left <= 0 or need > left:
                return
            budget = min(budget, left / (len(req["batch_sizes"]) - i))
        arrays = random_inputs(specs, batch, seed=batch)
        t0 = time.perf_counter()
        for _ in range(warmup):
            request(pred, names, arrays)
            if time.perf_counter() - t0 > budget / 2:
                break
        times: list[float] = []
        while len(times) < runs:
            start = time.perf_counter()
            request(pred, names, arrays)
            end = time.perf_counter()
            times.append(end - start)
            if len(times) >= MIN_TIMED_RUNS and end - t0 > budget:
                break
        done = (batch, float(np.median(times)))
        emit(
            {
                "result": {
                    "batch_size": batch,
                    "threads": int(req["threads"]),
                    "median_s": float(np.median(times)),
                    "p95_s": float(np.percentile(times, 95, method="linear")),
                    "runs": len(times),
                    "peak_rss_bytes": _peak_rss_bytes(),
                }
            }
        )


def _predict(req: dict[str, Any]) -> None:
    """Outputs for the arrays of ``req['inputs']`` (an .npz), saved to ``req['outputs']``."""
    pred, names = _child_predictor(req)
    with np.load(req["inputs"]) as z:
        arrays = [z[f"arr_{i}"] for i in range(len(z.files))]
    np.savez(req["outputs"], *request(pred, names, arrays))


def _child_main() -> int:
    """Entry point of the child: request on stdin, JSON lines on the real stdout (Paddle's output goes to stderr).
    Exit code 0, 2 for a spec mismatch (an ``{"error": ...}`` line), else Python's for an exception."""
    warnings.filterwarnings("ignore", category=UserWarning)  # Paddle's import-time "No ccache found"
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever Paddle's C++ side prints never interleaves with the JSON lines

    def emit(doc: dict[str, Any]) -> None:
        out.write(json.dumps(doc) + "\n")  # line-buffered: the parent sees each configuration as it ends

    req = json.loads(sys.stdin.read())
    try:
        _bench(req, emit) if req["op"] == "bench" else _predict(req)
    except InputSpecError as exc:
        emit({"error": str(exc)})
        return 2
    emit({"done": True, "peak_rss_bytes": _peak_rss_bytes()})
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
