"""Short measured trials over a job's settings (``paddlefit tune``): :mod:`paddlefit.tune.trials`."""
