"""What runs Paddle on this machine to measure a model for ``plan``: the CPU memory/time probe
(:mod:`~paddlefit.probe.memory`, calling the job as :mod:`~paddlefit.probe.job_call` does), the hook-based FLOP
counter (:mod:`~paddlefit.probe.flops` with its rule modules :mod:`~paddlefit.probe.flop_functional`,
:mod:`~paddlefit.probe.flop_layers`, :mod:`~paddlefit.probe.fused_hooks` and the CPU references of GPU-only fused
ops, :mod:`~paddlefit.probe.fused_ref`), the operator-trace recorder (:mod:`~paddlefit.probe.recorder`), the reader
of an exported program (:mod:`~paddlefit.probe.program_trace`) and the host-overhead timer
(:mod:`~paddlefit.probe.host_overhead`).

It sits beside :mod:`paddlefit.models` (it builds and calls the user's model) and above :mod:`paddlefit.estimate`,
whose arithmetic turns what it measures into predictions; nothing in ``estimate`` imports it.
"""
