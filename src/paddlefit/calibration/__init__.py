"""Calibration files shipped with paddlefit: every ``*.json`` here (one per device, written by ``paddlefit
calibrate``) is read by :func:`paddlefit.plan.calibration.load_calibrations` before any ``--calibration`` file.
None ship yet (no GPU has been measured); the package is the directory ``importlib.resources`` reads."""
