"""Estimators behind ``plan``: model states analytically (:mod:`~paddlefit.estimate.model_states`), activations and
workspace by a CPU probe (:mod:`~paddlefit.estimate.memory`, :mod:`~paddlefit.estimate.job_call`,
:mod:`~paddlefit.estimate.probe_result`), FLOPs by a hook-based counter (:mod:`~paddlefit.estimate.flops` and its
rule modules), the per-operator GPU step time (:mod:`~paddlefit.estimate.gpu_model`,
:mod:`~paddlefit.estimate.kernels`, :mod:`~paddlefit.estimate.amp`, :mod:`~paddlefit.estimate.perf_params`), host
overhead and all-reduce (:mod:`~paddlefit.estimate.timing`), Korthikanti closed forms
(:mod:`~paddlefit.estimate.analytic`).
"""
