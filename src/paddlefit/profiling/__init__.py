"""The step profiler behind ``paddlefit profile``: it times the components of real training steps
(:mod:`~paddlefit.profiling.profiler`, which runs ``train``'s step), names the bottleneck by the rules of
:mod:`~paddlefit.profiling.verdict_rules` and ranks the fixes (:mod:`~paddlefit.profiling.verdict`, pure).
It sits above ``train``; ``diagnose`` (the machine's checks and snapshot) sits below it.
"""
