"""Calibration files shipped with paddlefit (JSON, one per device; see ``paddlefit.plan.calibration``)."""
