"""Estimators behind ``plan``, arithmetic on data that never imports Paddle: model states
(:mod:`~paddlefit.estimate.model_states`), the probe's measurements and fitted lines
(:mod:`~paddlefit.estimate.probe_result`), the operator trace (:mod:`~paddlefit.estimate.optrace`) and its fused
kernels (:mod:`~paddlefit.estimate.fused`), the per-operator GPU step time (:mod:`~paddlefit.estimate.gpu_model`,
:mod:`~paddlefit.estimate.kernels`, :mod:`~paddlefit.estimate.amp`, :mod:`~paddlefit.estimate.perf_params`), host
overhead and all-reduce (:mod:`~paddlefit.estimate.timing`), Korthikanti closed forms
(:mod:`~paddlefit.estimate.analytic`). What runs Paddle to measure a model on this machine (the CPU probe, the FLOP
counter, the trace recorder) is :mod:`paddlefit.probe`.
"""
