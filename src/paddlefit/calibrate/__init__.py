"""``paddlefit calibrate``: measure this machine's devices (kernels, host overhead, the serving predictor) into a
calibration file that ``plan`` reads (:mod:`paddlefit.plan.calibration`)."""
