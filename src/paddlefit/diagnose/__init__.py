"""Machine diagnosis behind ``paddlefit doctor``: collect the environment once into a snapshot, run the
registered checks over it, and report each finding with its fix.

- :mod:`~paddlefit.diagnose.snapshot`: ``collect_snapshot()`` / ``load_snapshot()`` -> :class:`Snapshot`.
- :mod:`~paddlefit.diagnose.registry`: :class:`Finding`, :class:`JobContext`, the ``@check`` registry,
  ``fix_script`` and ``fix_env`` (what the fixes set, as data).
- :mod:`~paddlefit.diagnose.checks`: the checks PF100-PF124 and ``run_checks``.
- :mod:`~paddlefit.diagnose.doctor`: ``run_doctor(DoctorRequest)``, the whole ``doctor`` command minus rendering.

Example:
    >>> from paddlefit.diagnose import collect_snapshot, run_checks
    >>> problems = [f for f in run_checks(collect_snapshot()) if f.severity in ("warn", "error")]  # doctest: +SKIP
"""

from paddlefit.diagnose.checks import run_checks
from paddlefit.diagnose.registry import Finding, JobContext, fix_env, fix_script
from paddlefit.diagnose.snapshot import Snapshot, collect_snapshot, load_snapshot

__all__ = [
    "Finding",
    "JobContext",
    "Snapshot",
    "collect_snapshot",
    "fix_env",
    "fix_script",
    "load_snapshot",
    "run_checks",
]
