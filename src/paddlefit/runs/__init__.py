"""The run registry: one SQLite row per training run (configuration, versions, predicted and measured figures,
results), written by the trainer's rank 0 and read by ``paddlefit runs`` and the planner's calibration.

``Registry().start_run(fields, warn)`` / ``update_run`` / ``resume_run`` never fail a run (a warning instead);
``list_runs`` / ``get_run`` / ``measured_runs`` raise :class:`RegistryError`. See ``docs/commands/runs.md``.
"""

from paddlefit.runs.registry import Registry, RegistryError, registry_path, utc_now
from paddlefit.runs.schema import SCHEMA_VERSION, STATUSES

__all__ = ["SCHEMA_VERSION", "STATUSES", "Registry", "RegistryError", "registry_path", "utc_now"]
